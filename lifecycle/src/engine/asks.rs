//! What a person's command asks of the engine and how the engine says no:
//! the asker's permission as the forge reads it ([`Permission`]), a new
//! variant ([`TryRequest`]) and a refusal worded as the reply
//! ([`Refusal`]). The commands (`crate::commands`) parse and answer them;
//! they live here so the engine needs nothing from the commands.

use std::fmt;

/// What `/klaud try` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryRequest {
    /// The new variant's name.
    pub name: String,
    /// The variant it builds on, if any.
    pub from: Option<String>,
    /// Its own edits.
    pub edits: Vec<klaud_planner::variant::Edit>,
}

/// Why Klaud will not do what a person asked, worded as the reply they get
/// (a retry of a candidate still running, a variant it cannot start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// A user's collaborator permission on the repository, as GitHub's
/// `GET /repos/{owner}/{repo}/collaborators/{user}/permission` reports it
/// (`role_name`, or the legacy `permission`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Permission {
    /// `admin`.
    Admin,
    /// `maintain`.
    Maintain,
    /// `write` (also legacy `push`).
    Write,
    /// `triage`.
    Triage,
    /// `read` (also legacy `pull`).
    Read,
    /// `none`.
    None,
    /// A spelling Klaud does not know (a custom repository role's name, or
    /// a role GitHub invents later): refused until someone decides otherwise.
    Unknown(String),
}

impl Permission {
    /// Parses GitHub's spelling (case-insensitive, legacy names too).
    pub fn parse(text: &str) -> Self {
        match text.trim().to_ascii_lowercase().as_str() {
            "admin" => Self::Admin,
            "maintain" => Self::Maintain,
            "write" | "push" => Self::Write,
            "triage" => Self::Triage,
            "read" | "pull" => Self::Read,
            "none" => Self::None,
            _ => Self::Unknown(text.to_owned()),
        }
    }

    /// Whether the role may push: `write`, `maintain` or `admin`. The one
    /// rule for commands and for the bot's own access (doctor).
    pub fn may_write(&self) -> bool {
        matches!(self, Self::Admin | Self::Maintain | Self::Write)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permission::Admin => "admin",
            Permission::Maintain => "maintain",
            Permission::Write => "write",
            Permission::Triage => "triage",
            Permission::Read => "read",
            Permission::None => "none",
            Permission::Unknown(text) => text,
        })
    }
}
