//! Everything Klaud writes on GitHub (pull request bodies, comments,
//! receipts, command replies, the dashboard issue, sign-off verdicts) is
//! rendered with the pieces in this crate, so one rule decides what outside
//! input can do there: nothing. A leaf crate, so the sign-off crate (which
//! depends on no Klaud crate but the planner) and the lifecycle and service
//! crates share it.
//!
//! - [`escape`]: outside text as inline Markdown ([`escape::text`]), as a
//!   code span ([`escape::code`]), in a title ([`escape::title`]), in an
//!   HTML attribute ([`escape::attribute`]), and as a link whose URL is
//!   checked ([`escape::link`]).
//! - [`Bilingual`]: a text with its English and Chinese written side by
//!   side, where it is defined.

pub mod bilingual;
pub mod escape;

pub use bilingual::Bilingual;
