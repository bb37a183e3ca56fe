//! Whether a recorded "not this image" decline is still in force, which
//! depends on the records of the candidate's sibling variants. It lives
//! beside the records rather than in `model` with [`Declined`] itself, so
//! that `model`, which the journal's records are made of, does not import
//! the journal back.

use super::journal::{CandidateRecord, Step};
use crate::model::{Declined, Outcome};

impl Declined {
    /// Whether the decline recorded on `rec` is in force, given every
    /// record known (`records`, `rec`'s siblings among them). Closing a
    /// variant's PR ends that variant only: the other variants of the same
    /// image race on, and the image is "not this image" only once the last
    /// of them is closed without a validated sibling. So a decline on a
    /// variant waits while a sibling of the same image still runs, and
    /// lapses when one was validated. A sibling without a record (another
    /// instance's journal) does not hold the decline back.
    pub fn stands(&self, rec: &CandidateRecord, records: &[CandidateRecord]) -> bool {
        let Some(info) = &rec.variant else {
            return true;
        };
        let same_image = |r: &CandidateRecord| {
            let image = if r.image.is_empty() {
                &info.base_image
            } else {
                &r.image
            };
            Self::image_of(image).is_none_or(|i| i == self.image)
        };
        !info
            .others()
            .filter_map(|s| records.iter().find(|r| r.candidate == s.candidate))
            .filter(|r| same_image(r))
            .any(|r| match (&r.ending, r.step) {
                (Some(e), Step::Done) => e.outcome == Outcome::Validated,
                _ => true,
            })
    }
}
