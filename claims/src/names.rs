//! Validated identifiers and the ref names built from them.
//!
//! The planner computes family and candidate ids (see `klaud_planner::identity`); this crate only
//! checks their shape, so a malformed id can never produce a ref name outside
//! `refs/heads/klaud/`.

use std::fmt;

/// Prefix of every claim ref.
pub const CLAIM_REF_PREFIX: &str = "refs/heads/klaud/claim-";
/// Prefix of every recovery lease ref.
pub const RECOVERY_REF_PREFIX: &str = "refs/heads/klaud/recovery-";

/// Whether `name` (a full ref name) is a claim or recovery-lease ref: the
/// only refs a ref store handed to claims may write.
pub fn is_coordination_ref(name: &str) -> bool {
    name.starts_with(CLAIM_REF_PREFIX) || name.starts_with(RECOVERY_REF_PREFIX)
}

/// Why an identifier was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Not 16 lowercase hex digits.
    #[error("family id {0:?} is not 16 lowercase hex digits")]
    Family(String),
    /// Not `<16 hex>-<16 hex>`.
    #[error("candidate id {0:?} is not <16 lowercase hex>-<16 lowercase hex>")]
    Candidate(String),
}

fn is_hex16(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A family id: the first 16 hex digits of `identity(family)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FamilyId(String);

impl FamilyId {
    /// Validates `id` as 16 lowercase hex digits.
    pub fn new(id: &str) -> Result<Self, IdError> {
        if is_hex16(id) {
            Ok(Self(id.to_owned()))
        } else {
            Err(IdError::Family(truncate_for_message(id)))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `refs/heads/klaud/claim-<family id>`.
    pub fn claim_ref(&self) -> String {
        format!("{CLAIM_REF_PREFIX}{}", self.0)
    }

    /// The family id named by a claim ref, if `name` is a well-formed one.
    pub fn from_claim_ref(name: &str) -> Option<Self> {
        name.strip_prefix(CLAIM_REF_PREFIX)
            .and_then(|rest| Self::new(rest).ok())
    }
}

impl fmt::Display for FamilyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A candidate id: `<family id>-<first 16 hex of identity(normalized image)>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CandidateId(String);

impl CandidateId {
    /// Validates `id` as `<16 lowercase hex>-<16 lowercase hex>`.
    pub fn new(id: &str) -> Result<Self, IdError> {
        match id.split_once('-') {
            Some((family, image)) if is_hex16(family) && is_hex16(image) => Ok(Self(id.to_owned())),
            _ => Err(IdError::Candidate(truncate_for_message(id))),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The family part of the id.
    pub fn family(&self) -> FamilyId {
        FamilyId(self.0[..16].to_owned())
    }

    /// `refs/heads/klaud/recovery-<owner run>-<candidate id>`.
    pub fn recovery_ref(&self, owner_run: u64) -> String {
        format!("{RECOVERY_REF_PREFIX}{owner_run}-{}", self.0)
    }

    /// The owner run and candidate named by a recovery lease ref, if `name`
    /// is a well-formed one.
    pub fn from_recovery_ref(name: &str) -> Option<(u64, Self)> {
        let (run, candidate) = name.strip_prefix(RECOVERY_REF_PREFIX)?.split_once('-')?;
        if run.is_empty() || run.len() > 20 || !run.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((run.parse().ok()?, Self::new(candidate).ok()?))
    }
}

impl fmt::Display for CandidateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `FromStr`, `AsRef<str>`, comparison with text, and serde as the plain
/// id text (validated when read, so a record naming a malformed id fails to
/// load with an error that quotes it).
macro_rules! id_traits {
    ($name:ident) => {
        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::new(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_traits!(FamilyId);
id_traits!(CandidateId);

/// A pull request's number. Shown bare (`#{n}` and URLs are written around
/// it), stored as the plain number.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct PullNumber(u64);

impl PullNumber {
    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for PullNumber {
    fn from(n: u64) -> Self {
        Self(n)
    }
}

impl From<PullNumber> for u64 {
    fn from(n: PullNumber) -> Self {
        n.0
    }
}

// Debug as the bare value, so debug dumps of records read as they did when
// these fields were plain numbers and strings.
impl fmt::Debug for PullNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Debug for CommitSha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for PullNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Why text is not a commit sha.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("commit sha {text:?} is not 40 or 64 hex digits ({problem})")]
pub struct CommitShaError {
    /// The start of the rejected text.
    pub text: String,
    /// What was wrong with it.
    pub problem: &'static str,
}

/// A git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
/// Checked when made and when read from a record, so a stored head, base or
/// claim commit is always one git could name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommitSha(String);

impl CommitSha {
    /// Validates `text` as a full sha; upper-case hex is accepted and
    /// lowered, as git itself treats it.
    pub fn parse(text: &str) -> Result<Self, CommitShaError> {
        let problem = if text.len() != 40 && text.len() != 64 {
            Some("wrong length")
        } else if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Some("not hex")
        } else {
            None
        };
        match problem {
            None => Ok(Self(text.to_ascii_lowercase())),
            Some(problem) => Err(CommitShaError {
                text: truncate_for_message(text),
                problem,
            }),
        }
    }

    /// The sha as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 7 digits, as git abbreviates.
    pub fn short(&self) -> &str {
        &self.0[..7]
    }
}

impl fmt::Display for CommitSha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for CommitSha {
    type Err = CommitShaError;
    fn from_str(s: &str) -> Result<Self, CommitShaError> {
        Self::parse(s)
    }
}

impl TryFrom<String> for CommitSha {
    type Error = CommitShaError;
    fn try_from(s: String) -> Result<Self, CommitShaError> {
        Self::parse(&s)
    }
}

impl From<CommitSha> for String {
    fn from(sha: CommitSha) -> Self {
        sha.0
    }
}

// A sha is read as text everywhere git names commits (URLs, ref updates,
// markers); dereferencing keeps those reads plain while the type still
// guarantees that what is stored was checked.
impl std::ops::Deref for CommitSha {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for CommitSha {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for CommitSha {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for CommitSha {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CommitSha {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for CommitSha {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<CommitSha> for str {
    fn eq(&self, other: &CommitSha) -> bool {
        self == other.0
    }
}

impl PartialEq<CommitSha> for &str {
    fn eq(&self, other: &CommitSha) -> bool {
        *self == other.0
    }
}

impl PartialEq<CommitSha> for String {
    fn eq(&self, other: &CommitSha) -> bool {
        *self == other.0
    }
}

/// Hostile input can be arbitrarily long; error messages quote only its start.
pub(crate) fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_strings_in_serde_and_checked_when_read() {
        let id = CandidateId::new("d92e15065c55779d-0123456789abcdef").expect("valid");
        let json = serde_json::to_string(&id).expect("encodes");
        assert_eq!(json, "\"d92e15065c55779d-0123456789abcdef\"");
        assert_eq!(
            serde_json::from_str::<CandidateId>(&json).expect("decodes"),
            id
        );
        assert_eq!(id.as_str().parse::<CandidateId>(), Ok(id.clone()));
        let err = serde_json::from_str::<CandidateId>("\"c\"").unwrap_err();
        assert!(err.to_string().contains("candidate id \"c\""), "{err}");
        let fam: FamilyId = serde_json::from_str("\"d92e15065c55779d\"").expect("decodes");
        assert_eq!(fam, id.family());
        assert!(serde_json::from_str::<FamilyId>("\"D92E\"").is_err());
    }

    #[test]
    fn family_id_accepts_known_value_and_builds_claim_ref() {
        let id = FamilyId::new("d92e15065c55779d").expect("valid id");
        assert_eq!(id.claim_ref(), "refs/heads/klaud/claim-d92e15065c55779d");
        assert_eq!(FamilyId::from_claim_ref(&id.claim_ref()), Some(id));
    }

    #[test]
    fn family_id_rejects_wrong_shapes() {
        for bad in [
            "",
            "d92e15065c55779",
            "d92e15065c55779dd",
            "D92E15065C55779D",
            "../../../etc/pa",
            "d92e15065c55779g",
        ] {
            assert!(FamilyId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            FamilyId::from_claim_ref("refs/heads/klaud/claim-nothex"),
            None
        );
        assert_eq!(
            FamilyId::from_claim_ref("refs/heads/other-d92e15065c55779d"),
            None
        );
    }

    #[test]
    fn candidate_id_validates_and_names_recovery_ref() {
        let id = CandidateId::new("d92e15065c55779d-0123456789abcdef").expect("valid id");
        assert_eq!(id.family().as_str(), "d92e15065c55779d");
        assert_eq!(
            id.recovery_ref(35570778795),
            "refs/heads/klaud/recovery-35570778795-d92e15065c55779d-0123456789abcdef"
        );
        let name = id.recovery_ref(35570778795);
        assert_eq!(
            CandidateId::from_recovery_ref(&name),
            Some((35570778795, id.clone()))
        );
        for bad in [
            "refs/heads/klaud/recovery--d92e15065c55779d-0123456789abcdef",
            "refs/heads/klaud/recovery-12x-d92e15065c55779d-0123456789abcdef",
            "refs/heads/klaud/recovery-99999999999999999999-d92e15065c55779d-0123456789abcdef",
            "refs/heads/klaud/recovery-1-d92e15065c55779d",
            "refs/heads/klaud/claim-d92e15065c55779d",
        ] {
            assert_eq!(CandidateId::from_recovery_ref(bad), None, "{bad}");
        }
        for bad in [
            "d92e15065c55779d",
            "d92e15065c55779d-",
            "d92e15065c55779d-0123456789abcdeF",
            "d92e15065c55779d-0123456789abcdef-",
            "é2e15065c55779d-0123456789abcdef",
        ] {
            assert!(CandidateId::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn pull_numbers_are_bare_numbers_in_text_and_serde() {
        let n = PullNumber::from(1234);
        assert_eq!(format!("#{n}"), "#1234");
        assert_eq!(serde_json::to_string(&n).expect("encodes"), "1234");
        assert_eq!(
            serde_json::from_str::<PullNumber>("1234").expect("decodes"),
            n
        );
        assert_eq!(n.get(), 1234);
    }

    #[test]
    fn commit_shas_are_checked_lowered_and_stored_as_text() {
        let sha1 = "0123456789ABCDEF0123456789abcdef01234567";
        let sha = CommitSha::parse(sha1).expect("sha-1");
        assert_eq!(sha, "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(sha.short(), "0123456");
        assert!(CommitSha::parse(&"a".repeat(64)).is_ok(), "sha-256");
        let json = serde_json::to_string(&sha).expect("encodes");
        assert_eq!(json, "\"0123456789abcdef0123456789abcdef01234567\"");
        assert_eq!(
            serde_json::from_str::<CommitSha>(&json).expect("decodes"),
            sha
        );
        for (bad, problem) in [
            ("", "wrong length"),
            ("abc", "wrong length"),
            (&"a".repeat(41)[..], "wrong length"),
            ("g123456789abcdef0123456789abcdef01234567", "not hex"),
            ("refs/heads/main-and-some-more-text-to-40", "not hex"),
        ] {
            assert_eq!(
                CommitSha::parse(bad).map_err(|e| e.problem),
                Err(problem),
                "{bad:?}"
            );
        }
        let err = serde_json::from_str::<CommitSha>("\"main\"").unwrap_err();
        assert!(err.to_string().contains("commit sha \"main\""), "{err}");
        let long = "x".repeat(10_000);
        assert!(CommitSha::parse(&long).unwrap_err().to_string().len() < 200);
    }

    #[test]
    fn error_messages_truncate_hostile_input() {
        let long = "x".repeat(10_000);
        let message = FamilyId::new(&long).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
    }
}
