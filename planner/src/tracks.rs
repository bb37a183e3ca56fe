//! Tag tracks: which newer tag counts as "the next one".
//!
//! A family follows the track of its current tag and never jumps tracks
//! implicitly. A built-in track is inferred from the tag's shape: the parts
//! that change from build to build (a version, a date, a commit) become
//! captures and everything else is fixed text, so `v0.5.16-cu130` is on
//! `v<semver>-cu130` and never on `v<semver>-cu130-runtime`.
//!
//! Inference is deliberately conservative: a tag whose shape is ambiguous
//! (two versions, an unexplained number, a word hiding a date) gets no
//! track, and the planner reports it as `unknown-track` rather than guess.
//! Some shapes need the registry's clock as well as the text: a feature
//! build named only by a commit is ordered by push or creation time within
//! its exact prefix, a year-less `MMDD` date takes its year from the image's
//! time ([`TagPosition::key_at`]), and builds that share a version or date
//! but differ in commit are told apart by time ([`Track::ties_by_time`]). Configuration can add or override a
//! track per image repository with a regex and an ordering ([`TrackRule`]).
//!
//! Pure logic: no I/O.

use bases::{BASE_PATTERN, base_capture, base_placeholder, base_tokens};
pub use bases::{BaseChange, base_change_sentence, base_changes};
use std::cmp::Ordering;
use std::fmt;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use regex::{Regex, RegexBuilder};

/// How tags on a track are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackOrdering {
    /// By the `version` capture: numeric components, pre-releases (`rcN`)
    /// before the release, `.postN` after it. A date, when the tag also
    /// carries one, breaks ties.
    Semver,
    /// By the `number` capture as an integer.
    Numeric,
    /// By the `date` capture (`YYYYMMDD`, `YYYYMMDDhhmm`, `YYYYMMDDhhmmss`
    /// or `YYYY-MM-DD`).
    Date,
    /// The text has no order: the registry's push time decides.
    Pushed,
}

impl TrackOrdering {
    /// The configuration spelling: `semver`, `numeric`, `date`, `pushed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Semver => "semver",
            Self::Numeric => "numeric",
            Self::Date => "date",
            Self::Pushed => "pushed",
        }
    }

    /// The capture this ordering reads, if any.
    fn required_capture(self) -> Option<&'static str> {
        match self {
            Self::Semver => Some(CAP_VERSION),
            Self::Numeric => Some(CAP_NUMBER),
            Self::Date => Some(CAP_DATE),
            Self::Pushed => None,
        }
    }
}

impl fmt::Display for TrackOrdering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TrackOrdering {
    type Err = TrackError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "semver" => Ok(Self::Semver),
            "numeric" => Ok(Self::Numeric),
            "date" => Ok(Self::Date),
            "pushed" => Ok(Self::Pushed),
            other => Err(TrackError::UnknownOrdering(
                other.chars().take(40).collect(),
            )),
        }
    }
}

const CAP_VERSION: &str = "version";
const CAP_DATE: &str = "date";
const CAP_NUMBER: &str = "number";
const CAP_COMMIT: &str = "commit";
/// A year-less `MMDD` date; only inferred tracks use it (its year comes
/// from the image's clock, see [`TagPosition::key_at`]).
const CAP_MONTH_DAY: &str = "monthday";
const KNOWN_CAPTURES: [&str; 4] = [CAP_VERSION, CAP_DATE, CAP_NUMBER, CAP_COMMIT];

/// Bounds the compiled size of a configured regex.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Longest tag considered (the OCI spec caps tags at 128 characters).
const MAX_TAG_LEN: usize = 128;

/// A configuration or matching error of a track rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    /// The rule's regex does not compile.
    #[error("track rule for {repository}: regex {pattern:?} is invalid: {message}")]
    InvalidRegex {
        /// Image repository of the rule.
        repository: String,
        /// The regex.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
    /// The ordering needs a capture the regex lacks.
    #[error(
        "track rule for {repository}: ordering `{ordering}` needs a named capture (?P<{capture}>...) in regex {pattern:?}"
    )]
    MissingCapture {
        /// Image repository of the rule.
        repository: String,
        /// The regex.
        pattern: String,
        /// The ordering.
        ordering: TrackOrdering,
        /// The missing capture name.
        capture: &'static str,
    },
    /// A named capture other than version, date, number, commit.
    #[error(
        "track rule for {repository}: regex {pattern:?} has capture `{capture}`; only version, date, number and commit are allowed"
    )]
    UnknownCapture {
        /// Image repository of the rule.
        repository: String,
        /// The regex.
        pattern: String,
        /// The unexpected capture name.
        capture: String,
    },
    /// The rule names no repository.
    #[error("track rule with regex {0:?} names no image repository")]
    EmptyRepository(String),
    /// An ordering other than semver, numeric, date, pushed.
    #[error("unknown track ordering {0:?}; expected semver, numeric, date or pushed")]
    UnknownOrdering(String),
    /// A configured rule matched a tag, but a capture does not parse.
    #[error(transparent)]
    BadCapture(Box<BadCapture>),
}

/// A configured rule matched a tag, but one of its captures does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "track rule for {repository} ({pattern:?}) matched tag {tag:?}, but its `{capture}` capture {value:?} is not {expected}"
)]
pub struct BadCapture {
    /// Image repository of the rule.
    pub repository: String,
    /// The regex.
    pub pattern: String,
    /// The tag.
    pub tag: String,
    /// The capture.
    pub capture: &'static str,
    /// What it captured.
    pub value: String,
    /// What it should be.
    pub expected: &'static str,
}

/// Pre-release marker of a version; variant order is precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pre {
    Alpha(u64),
    Beta(u64),
    Rc(u64),
    /// No pre-release: the release itself, after all its pre-releases.
    Final,
}

/// A parsed version: `[v]1.3.0rc22.post1`.
///
/// Trailing zero components are dropped so that `0.26` and `0.26.0` compare
/// equal, keeping equality consistent with the ordering.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version {
    release: Vec<u64>,
    pre: Pre,
    post: Option<u64>,
}

impl Version {
    /// Parses `[v]N.N[.N[.N]][(a|b|rc)N][.postN]`; `None` otherwise.
    pub fn parse(text: &str) -> Option<Self> {
        let s = text.strip_prefix('v').unwrap_or(text);
        let (s, post) = match s.rfind(".post") {
            Some(i) => (&s[..i], Some(small_number(&s[i + ".post".len()..])?)),
            None => (s, None),
        };
        let release_len = s
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let (release_text, rest) = s.split_at(release_len);
        let mut release = release_text
            .split('.')
            .map(small_number)
            .collect::<Option<Vec<_>>>()?;
        if !(2..=4).contains(&release.len()) {
            return None;
        }
        while release.len() > 1 && release.last() == Some(&0) {
            release.pop();
        }
        let pre = if rest.is_empty() {
            Pre::Final
        } else if let Some(n) = rest.strip_prefix("rc") {
            Pre::Rc(small_number(n)?)
        } else if let Some(n) = rest.strip_prefix('a') {
            Pre::Alpha(small_number(n)?)
        } else if let Some(n) = rest.strip_prefix('b') {
            Pre::Beta(small_number(n)?)
        } else {
            return None;
        };
        Some(Self { release, pre, post })
    }

    /// [`Version::parse`], also reading a bare `.post` (`atom0.1.2.post`, a
    /// post-release its makers did not number) as `.post0`.
    pub fn parse_lenient(text: &str) -> Option<Self> {
        match text.strip_suffix(".post") {
            Some(release) => Self::parse(&format!("{release}.post0")),
            None => Self::parse(text),
        }
    }

    /// Whether this is a pre-release (`rcN`, `aN`, `bN`).
    pub fn is_prerelease(&self) -> bool {
        self.pre != Pre::Final
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let len = self.release.len().max(other.release.len());
        let component = |v: &Version, i: usize| v.release.get(i).copied().unwrap_or(0);
        (0..len)
            .map(|i| component(self, i).cmp(&component(other, i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .then(self.pre.cmp(&other.pre))
            .then(self.post.cmp(&other.post))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// 1–9 ASCII digits (a bound that keeps every component far from overflow).
fn small_number(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Where a tag sits on its track. Keys are comparable only within a track.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SortKey {
    /// The version, for semver tracks.
    pub version: Option<Version>,
    /// The date (and time, when the tag has one).
    pub date: Option<NaiveDateTime>,
    /// The build number, for numeric tracks.
    pub number: Option<u64>,
    /// The versions of the bases the build is made on (ROCm, CUDA, Python,
    /// PyTorch), in tag order. Last, so they only break ties: builds are
    /// ordered by their own date or version across bases, as maintainers
    /// move them, and of two builds of one version the newer base wins.
    pub bases: Vec<Vec<u64>>,
}

/// A tag's position on a track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPosition {
    /// Comparable key; `None` on `pushed` tracks (the registry's clock
    /// decides). On a track with a year-less date the key lacks the date
    /// until [`TagPosition::key_at`] supplies the year.
    pub key: Option<SortKey>,
    /// The upstream commit named in the tag, if any (as written).
    pub commit: Option<String>,
    /// A year-less date (`MMDD`) in the tag: (month, day).
    pub month_day: Option<(u32, u32)>,
    /// The base versions the tag names, as written, in tag order (see
    /// [`Track::base_names`]).
    pub bases: Vec<String>,
}

impl TagPosition {
    /// The key once the image's push or creation time is known: a
    /// year-less date takes the latest year that does not put it after the
    /// image was made (two days of slack for time zones and late pushes).
    /// Without a year-less date this is [`TagPosition::key`].
    pub fn key_at(&self, time: chrono::DateTime<chrono::Utc>) -> Option<SortKey> {
        let mut key = self.key.clone()?;
        if let Some((month, day)) = self.month_day {
            key.date = Some(year_for(month, day, time)?.and_time(NaiveTime::MIN));
        }
        Some(key)
    }

    /// Whether [`TagPosition::key`] is complete without a clock.
    pub fn needs_time_for_key(&self) -> bool {
        self.month_day.is_some()
    }
}

/// The year of a year-less date made no later than `time` (+2 days).
fn year_for(month: u32, day: u32, time: chrono::DateTime<chrono::Utc>) -> Option<NaiveDate> {
    let latest = time.date_naive() + chrono::Duration::days(2);
    let year = chrono::Datelike::year(&latest);
    // February 29 exists once in four years; nothing else needs more than one step back.
    (0..=4)
        .filter_map(|back| NaiveDate::from_ymd_opt(year - back, month, day))
        .find(|date| *date <= latest)
}

/// Where a track came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackSource {
    /// Inferred from the shape of the current tag.
    Inferred,
    /// A configured [`TrackRule`].
    Configured,
}

/// A tag track: a pattern with captures plus an ordering.
#[derive(Debug, Clone)]
pub struct Track {
    name: String,
    ordering: TrackOrdering,
    regex: Regex,
    source: TrackSource,
    /// What each base capture (`base0`, `base1`, ...) is a version of.
    bases: Vec<&'static str>,
}

impl PartialEq for Track {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.ordering == other.ordering
            && self.regex.as_str() == other.regex.as_str()
    }
}

impl Eq for Track {}

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.ordering)
    }
}

impl Track {
    /// A readable pattern, e.g. `v<semver>-cu130` or `nightly-<commit>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How tags on this track are ordered.
    pub fn ordering(&self) -> TrackOrdering {
        self.ordering
    }

    /// Whether the track was inferred or configured.
    pub fn source(&self) -> TrackSource {
        self.source
    }

    /// The anchored regex tags must match.
    pub fn pattern(&self) -> &str {
        self.regex.as_str()
    }

    /// What the base versions a tag on this track carries are versions of
    /// (`ROCm`, `PyTorch`), in tag order; empty when the track fixes its
    /// bases (a configured track, or one ordered by push time alone).
    pub fn base_names(&self) -> &[&'static str] {
        &self.bases
    }

    /// Whether tags whose text keys are equal (the same version or date,
    /// another commit: rebuilds) are ordered by push or creation time. True
    /// for ordered tracks that capture a commit.
    pub fn ties_by_time(&self) -> bool {
        self.ordering != TrackOrdering::Pushed && self.has_capture(CAP_COMMIT)
    }

    /// Whether a tag's key needs the image's time: the tag carries a
    /// year-less date ([`TagPosition::key_at`]).
    pub fn needs_time_for_key(&self) -> bool {
        self.has_capture(CAP_MONTH_DAY)
    }

    fn has_capture(&self, name: &str) -> bool {
        self.regex.capture_names().flatten().any(|n| n == name)
    }

    /// The tag's position when it is on this track; `None` when it is not
    /// (including when a capture does not parse, e.g. a date of month 13).
    pub fn matches(&self, tag: &str) -> Option<TagPosition> {
        self.position(tag).ok().flatten()
    }

    fn position(
        &self,
        tag: &str,
    ) -> Result<Option<TagPosition>, (&'static str, String, &'static str)> {
        if tag.len() > MAX_TAG_LEN {
            return Ok(None);
        }
        let Some(caps) = self.regex.captures(tag) else {
            return Ok(None);
        };
        let text = |name: &str| caps.name(name).map(|m| m.as_str());
        let version = text(CAP_VERSION)
            .map(|v| {
                Version::parse_lenient(v).ok_or((
                    CAP_VERSION,
                    v.to_owned(),
                    "a version like 1.2.3, 1.3.0rc14 or 0.5.8.post1",
                ))
            })
            .transpose()?;
        let date = text(CAP_DATE)
            .map(|d| {
                parse_date(d).ok_or((
                    CAP_DATE,
                    d.to_owned(),
                    "a date like 20260815, 202606101403 or 2026-08-15",
                ))
            })
            .transpose()?;
        let number = text(CAP_NUMBER)
            .map(|n| {
                n.parse::<u64>()
                    .map_err(|_| (CAP_NUMBER, n.to_owned(), "a non-negative integer"))
            })
            .transpose()?;
        let commit = text(CAP_COMMIT).map(str::to_owned);
        let month_day = text(CAP_MONTH_DAY)
            .map(|md| {
                parse_month_day(md).ok_or((CAP_MONTH_DAY, md.to_owned(), "a date like 0227 (MMDD)"))
            })
            .transpose()?;
        let mut bases = Vec::with_capacity(self.bases.len());
        let mut base_keys = Vec::with_capacity(self.bases.len());
        for i in 0..self.bases.len() {
            let Some(v) = text(&base_capture(i)) else {
                continue;
            };
            base_keys.push(dotted(v).ok_or((
                "base",
                v.to_owned(),
                "a dotted version like 7.2.4",
            ))?);
            bases.push(v.to_owned());
        }
        // A build counter or `dev.N` breaks ties after the version and date,
        // and the bases after them.
        let key = match self.ordering {
            TrackOrdering::Pushed => None,
            TrackOrdering::Semver => Some(SortKey {
                version,
                date,
                number,
                bases: base_keys,
            }),
            TrackOrdering::Date => Some(SortKey {
                version: None,
                date,
                number,
                bases: base_keys,
            }),
            TrackOrdering::Numeric => Some(SortKey {
                version: None,
                date: None,
                number,
                bases: base_keys,
            }),
        };
        Ok(Some(TagPosition {
            key,
            commit,
            month_day,
            bases,
        }))
    }
}

/// `MMDD` with a month and day that exist in some year.
fn parse_month_day(text: &str) -> Option<(u32, u32)> {
    if text.len() != 4 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let month = text[..2].parse().ok()?;
    let day = text[2..].parse().ok()?;
    // 2024 is a leap year: every (month, day) that exists in some year exists in it.
    NaiveDate::from_ymd_opt(2024, month, day).map(|_| (month, day))
}

fn parse_date(text: &str) -> Option<NaiveDateTime> {
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let year_ok = |y: i32| (2000..=2099).contains(&y);
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return year_ok(chrono::Datelike::year(&date)).then(|| date.and_time(NaiveTime::MIN));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) || !matches!(text.len(), 8 | 12 | 14) {
        return None;
    }
    let year = i32::try_from(digits(0..4)?).ok()?;
    if !year_ok(year) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(year, digits(4..6)?, digits(6..8)?)?;
    let time = match text.len() {
        8 => NaiveTime::MIN,
        12 => NaiveTime::from_hms_opt(digits(8..10)?, digits(10..12)?, 0)?,
        _ => NaiveTime::from_hms_opt(digits(8..10)?, digits(10..12)?, digits(12..14)?)?,
    };
    Some(date.and_time(time))
}

/// One piece of a tag, as classified by inference.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// Separator or identifier kept verbatim.
    Fixed(String),
    /// A whole-token version, with its optional `v` kept as fixed text.
    /// `prerelease` says whether the current tag is one (`rcN`).
    Version { v_prefix: bool, prerelease: bool },
    /// `YYYYMMDD` or `YYYYMMDDhhmm`.
    Date { len: usize },
    /// A hex commit of this length.
    Commit { len: usize },
    /// A year-less date `MMDD` (`0227`): its year comes from the clock.
    MonthDay,
    /// `dev.N`: a development build number of the version before it.
    Dev,
    /// Digits with no recognisable meaning (`2` in `-0227-2`): a build
    /// counter right after a date, otherwise only acceptable on a pushed
    /// track, where the text does not order anything.
    Opaque { len: usize },
    /// A build counter after a date: orders builds of the same date.
    Counter,
    /// An identifier that carries a dotted version (`cu13.0.1`, `py3.12`).
    FixedVersioned(String),
}

fn is_commit_token(token: &str) -> bool {
    let hex = token
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex {
        return false;
    }
    if token.len() == 40 {
        return true;
    }
    // Short shas are 7–12 digits in practice; demand both a letter and a
    // digit so that plain numbers and hex-looking words are not commits.
    (7..=12).contains(&token.len())
        && token.bytes().any(|b| b.is_ascii_digit())
        && token.bytes().any(|b| b.is_ascii_lowercase())
}

/// `cu130`, `mi35x`, `nightly`: a letter, then letters and digits.
fn is_identifier(token: &str) -> bool {
    let mut bytes = token.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric())
}

/// `cu13.0.1`, `py3.12`: letters, digits, then dotted digit groups.
fn is_versioned_identifier(token: &str) -> bool {
    let Some((head, tail)) = token.split_once('.') else {
        return false;
    };
    let letters = head.bytes().take_while(u8::is_ascii_alphabetic).count();
    let digits = &head[letters..];
    letters > 0
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && tail
            .split('.')
            .all(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
}

fn classify(token: &str) -> Option<Piece> {
    if token == "x86_64" {
        return Some(Piece::Fixed(token.to_owned()));
    }
    if let Some(version) = Version::parse(token) {
        return Some(Piece::Version {
            v_prefix: token.starts_with('v'),
            prerelease: version.is_prerelease(),
        });
    }
    if token.bytes().all(|b| b.is_ascii_digit()) {
        return Some(match token.len() {
            8 | 12 if parse_date(token).is_some() => Piece::Date { len: token.len() },
            4 if parse_month_day(token).is_some() => Piece::MonthDay,
            _ => Piece::Opaque { len: token.len() },
        });
    }
    if token
        .strip_prefix("dev.")
        .is_some_and(|n| small_number(n).is_some())
    {
        return Some(Piece::Dev);
    }
    if is_commit_token(token) {
        return Some(Piece::Commit { len: token.len() });
    }
    if is_identifier(token) {
        // An identifier hiding a date-sized digit run (`atom20260511`) is a
        // variable part we cannot separate safely.
        let longest_run = token
            .split(|c: char| !c.is_ascii_digit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        return (longest_run < 6).then(|| Piece::Fixed(token.to_owned()));
    }
    if is_versioned_identifier(token) {
        return Some(Piece::FixedVersioned(token.to_owned()));
    }
    None
}

/// `atom20260511` → (`atom`, `20260511`): letters, then a valid 8- or
/// 12-digit date that ends the token.
fn word_then_date(token: &str) -> Option<(&str, &str)> {
    let at = token.find(|c: char| c.is_ascii_digit())?;
    let (word, date) = token.split_at(at);
    (!word.is_empty()
        && word.bytes().all(|b| b.is_ascii_alphabetic())
        && matches!(date.len(), 8 | 12)
        && date.bytes().all(|b| b.is_ascii_digit())
        && parse_date(date).is_some())
    .then_some((word, date))
}

/// Splits on `-` and `_`, keeping separators, and keeps `x86_64` whole.
fn tokens(tag: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in tag.char_indices() {
        if c == '-' || c == '_' {
            if start < i {
                out.push(&tag[start..i]);
            }
            out.push(&tag[i..i + 1]);
            start = i + 1;
        }
    }
    if start < tag.len() {
        out.push(&tag[start..]);
    }
    let mut merged: Vec<&str> = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        if out[i] == "x86" && out.get(i + 1) == Some(&"_") && out.get(i + 2) == Some(&"64") {
            let begin = out[i].as_ptr() as usize - tag.as_ptr() as usize;
            merged.push(&tag[begin..begin + "x86_64".len()]);
            i += 3;
        } else {
            merged.push(out[i]);
            i += 1;
        }
    }
    merged
}

/// The `version` capture of a release track (`.postN` included).
const RELEASE_PATTERN: &str = r"(?P<version>[0-9]{1,9}(?:\.[0-9]{1,9}){1,3}(?:\.post[0-9]{1,9})?)";
/// The `version` capture of a track already on pre-releases (`rcN`, `aN`,
/// `bN`), which may also reach the release they lead to.
const PRERELEASE_PATTERN: &str =
    r"(?P<version>[0-9]{1,9}(?:\.[0-9]{1,9}){1,3}(?:(?:rc|a|b)[0-9]{1,9})?(?:\.post[0-9]{1,9})?)";

/// Infers the built-in track of `tag` from its shape; `None` when the tag
/// has no recognisable order (the planner reports `unknown-track`).
pub fn infer_track(tag: &str) -> Option<Track> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return None;
    }
    infer_from_pieces(tag).or_else(|| product_version_track(tag))
}

/// Names of toolchains and bases whose version a tag carries
/// (`py3.12`, `cuda12.8`): the build is for that toolchain, and a newer
/// one is another build, not the next of this one.
const TOOLCHAINS: &[&str] = &[
    "alpine", "cu", "cuda", "cudnn", "debian", "gcc", "jdk", "nccl", "node", "py", "python",
    "pytorch", "rocm", "torch", "ubuntu",
];

/// `7.2.4` → `[7, 2, 4]`: two to four dotted numbers.
fn dotted(text: &str) -> Option<Vec<u64>> {
    let parts = text
        .split('.')
        .map(small_number)
        .collect::<Option<Vec<_>>>()?;
    (2..=4).contains(&parts.len()).then_some(parts)
}

/// `…_2.10.0_atom0.1.3`, `vllm0.26`, `…_atom0.1.2.post`: a tag that nothing
/// else orders and that ends in a release version glued to the product's
/// name. That version orders it; everything before it is fixed text but
/// the versions of its bases (`rocm7.2.4`, `py3.12`, the `2.10.0` of
/// `pytorch_release_2.10.0`), which the build may move across like its
/// makers do. A toolchain's own name at the end (`…-cuda12.8`) orders
/// nothing, nor a version the text cannot parse.
fn product_version_track(tag: &str) -> Option<Track> {
    let tokens = tokens(tag);
    let (last, before) = tokens.split_last()?;
    let at = last.find(|c: char| c.is_ascii_digit())?;
    let (word, version) = last.split_at(at);
    // A lone `v` is a version's prefix, not a product (`v1.2.3-v1.2.4`).
    if word.len() < 2 || !word.bytes().all(|b| b.is_ascii_lowercase()) || TOOLCHAINS.contains(&word)
    {
        return None;
    }
    let parsed = Version::parse_lenient(version)?;
    for token in before {
        if *token == "-" || *token == "_" {
            continue;
        }
        match classify(token)? {
            Piece::Fixed(_) | Piece::FixedVersioned(_) | Piece::Version { .. } => {}
            // A date, commit or number elsewhere could be the real order.
            _ => return None,
        }
    }
    let bases = base_tokens(before);
    let mut name = String::new();
    let mut pattern = String::from("^");
    let mut names = Vec::new();
    for (i, token) in before.iter().enumerate() {
        match bases.iter().find(|b| b.index == i) {
            Some(base) => {
                name.push_str(&base_placeholder(base));
                pattern.push_str(&format!(
                    "{}(?P<{}>{BASE_PATTERN})",
                    regex::escape(base.word),
                    base_capture(names.len())
                ));
                names.push(base.name);
            }
            None => {
                name.push_str(token);
                pattern.push_str(&regex::escape(token));
            }
        }
    }
    name.push_str(word);
    pattern.push_str(&regex::escape(word));
    // An unnumbered `.post` may be followed by numbered ones.
    let capture = if parsed.is_prerelease() {
        name.push_str("<semver-pre>");
        PRERELEASE_PATTERN.replace(r"\.post[0-9]{1,9}", r"\.post[0-9]{0,9}")
    } else {
        name.push_str("<semver>");
        RELEASE_PATTERN.replace(r"\.post[0-9]{1,9}", r"\.post[0-9]{0,9}")
    };
    pattern.push_str(&capture);
    pattern.push('$');
    let regex = compiled(&pattern)?;
    let track = Track {
        name,
        ordering: TrackOrdering::Semver,
        regex,
        source: TrackSource::Inferred,
        bases: names,
    };
    track.matches(tag).map(|_| track)
}

/// [`infer_track`] from the tag's pieces (a version, date, commit or number
/// between fixed text).
fn infer_from_pieces(tag: &str) -> Option<Track> {
    let mut texts = Vec::new();
    let mut pieces = Vec::new();
    for token in tokens(tag) {
        texts.push(token);
        if token == "-" || token == "_" {
            pieces.push(Piece::Fixed(token.to_owned()));
        } else if let Some((word, date)) = word_then_date(token) {
            // `atom20260511`: a build date glued to a word. Only a whole,
            // valid date after letters is split off; other digit runs inside
            // an identifier stay unrecognised (see `classify`).
            texts.pop();
            texts.extend([word, date]);
            pieces.push(Piece::Fixed(word.to_owned()));
            pieces.push(Piece::Date { len: date.len() });
        } else {
            pieces.push(classify(token)?);
        }
    }
    let count = |pieces: &[Piece], f: fn(&Piece) -> bool| pieces.iter().filter(|p| f(p)).count();
    let is_dated = |p: &Piece| matches!(p, Piece::Date { .. } | Piece::MonthDay);
    // A number right after the date (`-0227-2`) counts that day's builds.
    if count(&pieces, is_dated) == 1
        && count(&pieces, |p| matches!(p, Piece::Opaque { .. })) == 1
        && count(&pieces, |p| matches!(p, Piece::Dev)) == 0
        && let Some(i) = pieces
            .iter()
            .position(|p| matches!(p, Piece::Opaque { .. }))
        && i >= 2
        && is_dated(&pieces[i - 2])
        && matches!(&pieces[i - 1], Piece::Fixed(t) if t == "-" || t == "_")
    {
        pieces[i] = Piece::Counter;
    }
    let versions = count(&pieces, |p| matches!(p, Piece::Version { .. }));
    let dates = count(&pieces, is_dated);
    let commits = count(&pieces, |p| matches!(p, Piece::Commit { .. }));
    let opaque = count(&pieces, |p| matches!(p, Piece::Opaque { .. }));
    let devs = count(&pieces, |p| matches!(p, Piece::Dev));
    let versioned_idents = count(&pieces, |p| matches!(p, Piece::FixedVersioned(_)));
    let nightly = pieces
        .iter()
        .any(|p| matches!(p, Piece::Fixed(t) if t.eq_ignore_ascii_case("nightly")));

    if versions > 1 || dates > 1 || commits > 1 || devs > 1 {
        return None;
    }
    // `dev.N` numbers the builds of a version; alone it orders nothing.
    if devs == 1 && versions == 0 {
        return None;
    }
    let ordering = if versions == 1 && versioned_idents == 0 {
        if opaque > 0 {
            return None;
        }
        TrackOrdering::Semver
    } else if versions == 1 && dates == 1 && opaque == 0 && devs == 0 {
        // A second dotted version inside an identifier (`py3.12`) makes it
        // unclear which version orders the tag; the date still does, with
        // every version kept as fixed text.
        for (piece, text) in pieces.iter_mut().zip(&texts) {
            if matches!(piece, Piece::Version { .. }) {
                *piece = Piece::Fixed((*text).to_owned());
            }
        }
        TrackOrdering::Date
    } else if versions == 1 {
        return None;
    } else if dates == 1 {
        if opaque > 0 {
            return None;
        }
        TrackOrdering::Date
    } else if commits + opaque > 0 && opaque <= 1 && (nightly || opaque == 0) {
        // A stream of builds named by commit (a nightly, or a feature
        // build's prefix): only push or creation time orders it, and only
        // tags with exactly this prefix and suffix are on it.
        TrackOrdering::Pushed
    } else {
        return None;
    };

    // A build ordered by its own date or version may move across the
    // versions of its bases; a stream ordered by push time alone stays on
    // its bases (a newer CUDA's nightlies are a parallel stream).
    let bases = if ordering == TrackOrdering::Pushed {
        Vec::new()
    } else {
        base_tokens(&texts)
    };
    let mut base_names = Vec::new();
    let mut name = String::new();
    let mut pattern = String::from("^");
    for (i, piece) in pieces.iter().enumerate() {
        if matches!(piece, Piece::Fixed(_) | Piece::FixedVersioned(_))
            && let Some(base) = bases.iter().find(|b| b.index == i)
        {
            name.push_str(&base_placeholder(base));
            pattern.push_str(&format!(
                "{}(?P<{}>{BASE_PATTERN})",
                regex::escape(base.word),
                base_capture(base_names.len())
            ));
            base_names.push(base.name);
            continue;
        }
        match piece {
            Piece::Fixed(text) | Piece::FixedVersioned(text) => {
                name.push_str(text);
                pattern.push_str(&regex::escape(text));
            }
            Piece::Version {
                v_prefix,
                prerelease,
            } => {
                if *v_prefix {
                    name.push('v');
                    pattern.push('v');
                }
                // A family on a release stays on releases; one already on
                // pre-releases (TensorRT-LLM's `rcN`) may also reach the
                // release they lead to.
                if *prerelease {
                    name.push_str("<semver-pre>");
                    pattern.push_str(PRERELEASE_PATTERN);
                } else {
                    name.push_str("<semver>");
                    pattern.push_str(RELEASE_PATTERN);
                }
            }
            Piece::Date { len } => {
                name.push_str(if *len == 8 {
                    "<yyyymmdd>"
                } else {
                    "<yyyymmddhhmm>"
                });
                pattern.push_str(&format!("(?P<date>[0-9]{{{len}}})"));
            }
            Piece::Commit { len } => {
                name.push_str("<commit>");
                pattern.push_str(&format!("(?P<commit>[0-9a-f]{{{len}}})"));
            }
            Piece::Opaque { len } => {
                name.push_str("<n>");
                pattern.push_str(&format!("[0-9]{{{len}}}"));
            }
            Piece::MonthDay => {
                name.push_str("<mmdd>");
                pattern.push_str(r"(?P<monthday>[0-9]{4})");
            }
            Piece::Dev => {
                name.push_str("dev.<n>");
                pattern.push_str(r"dev\.(?P<number>[0-9]{1,9})");
            }
            Piece::Counter => {
                name.push_str("<n>");
                pattern.push_str(r"(?P<number>[0-9]{1,9})");
            }
        }
    }
    pattern.push('$');
    let regex = compiled(&pattern)?;
    let track = Track {
        name,
        ordering,
        regex,
        source: TrackSource::Inferred,
        bases: base_names,
    };
    // The tag must sit on its own track; anything else is a bug in the rules
    // above, and answering "no track" is the safe way to fail.
    track.matches(tag).map(|_| track)
}

/// The compiled regex of an inferred track's pattern. Many families share
/// a tag shape (10,000 families over a few hundred repositories in the scale
/// benchmark), and compiling the same pattern for each was most of the
/// planner's own CPU; a `Regex` clone shares the compiled program. The memo
/// is emptied when it grows past a bound, so odd inputs cannot grow it
/// without end.
fn compiled(pattern: &str) -> Option<Regex> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    const MAX_PATTERNS: usize = 4096;
    static MEMO: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Mutex::default);
    if let Some(regex) = MEMO.lock().unwrap_or_else(|p| p.into_inner()).get(pattern) {
        return Some(regex.clone());
    }
    let regex = Regex::new(pattern).ok()?;
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    if memo.len() >= MAX_PATTERNS {
        memo.clear();
    }
    memo.insert(pattern.to_owned(), regex.clone());
    Some(regex)
}

/// A configured track for one image repository.
#[derive(Debug, Clone)]
pub struct TrackRule {
    repository: String,
    pattern: String,
    track: Track,
}

impl TrackRule {
    /// Compiles a rule. `pattern` must match the whole tag (it is anchored
    /// here), may use the named captures `version`, `date`, `number` and
    /// `commit`, and must have the capture its `ordering` reads.
    pub fn new(
        repository: &str,
        pattern: &str,
        ordering: TrackOrdering,
    ) -> Result<Self, TrackError> {
        let repository = repository.trim();
        if repository.is_empty() {
            return Err(TrackError::EmptyRepository(pattern.to_owned()));
        }
        let anchored = format!("^(?:{pattern})$");
        let regex = RegexBuilder::new(&anchored)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| TrackError::InvalidRegex {
                repository: repository.to_owned(),
                pattern: pattern.to_owned(),
                message: e.to_string(),
            })?;
        let names: Vec<&str> = regex.capture_names().flatten().collect();
        if let Some(unknown) = names.iter().find(|n| !KNOWN_CAPTURES.contains(n)) {
            return Err(TrackError::UnknownCapture {
                repository: repository.to_owned(),
                pattern: pattern.to_owned(),
                capture: (*unknown).to_owned(),
            });
        }
        if let Some(capture) = ordering.required_capture()
            && !names.contains(&capture)
        {
            return Err(TrackError::MissingCapture {
                repository: repository.to_owned(),
                pattern: pattern.to_owned(),
                ordering,
                capture,
            });
        }
        let track = Track {
            name: format!("/{pattern}/"),
            ordering,
            regex,
            source: TrackSource::Configured,
            bases: Vec::new(),
        };
        Ok(Self {
            repository: repository.to_owned(),
            pattern: pattern.to_owned(),
            track,
        })
    }

    /// The image repository the rule applies to, compared exactly with
    /// `ImageRef::normalized_repository()` (e.g. `vllm/vllm-openai`, no
    /// `docker.io/`); configuration should normalize it the same way.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The regex as configured (before anchoring).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The configured track.
    pub fn track(&self) -> &Track {
        &self.track
    }
}

/// The track of `tag` in `repository`: the first configured rule for the
/// repository that matches the tag, else the inferred track.
///
/// A rule whose regex matches but whose captures do not parse is a
/// configuration error, reported rather than skipped.
pub fn track_for(
    repository: &str,
    tag: &str,
    rules: &[TrackRule],
) -> Result<Option<Track>, TrackError> {
    for rule in rules.iter().filter(|r| r.repository == repository) {
        match rule.track.position(tag) {
            Ok(Some(_)) => return Ok(Some(rule.track.clone())),
            Ok(None) => {}
            Err((capture, value, expected)) => {
                return Err(TrackError::BadCapture(Box::new(BadCapture {
                    repository: rule.repository.clone(),
                    pattern: rule.pattern.clone(),
                    tag: tag.chars().take(MAX_TAG_LEN).collect(),
                    capture,
                    value,
                    expected,
                })));
            }
        }
    }
    Ok(infer_track(tag))
}

/// Whether the short commit in a tag names the full commit in an image label
/// (`org.opencontainers.image.revision`): a case-insensitive prefix match of
/// at least 7 hex digits.
pub fn commit_matches(tag_commit: &str, label: &str) -> bool {
    let label = label.trim();
    tag_commit.len() >= 7
        && tag_commit.len() <= label.len()
        && tag_commit.bytes().all(|b| b.is_ascii_hexdigit())
        && label.bytes().all(|b| b.is_ascii_hexdigit())
        && label.as_bytes()[..tag_commit.len()].eq_ignore_ascii_case(tag_commit.as_bytes())
}

mod bases;
#[cfg(test)]
mod tests;
