//! Retrieval as the store stood at a past time (`as_of`): the memories that were active and unexpired then (never
//! one forgotten since), read through each memory's active periods, and their chains cut at that time. Scores use
//! today's corpus statistics and confidences.

use chrono::{DateTime, Utc};

use crate::domain::{Memory, MemoryStatus};

/// Refuses a time the store cannot answer for: one in the future, or one combined with the archive (`as_of` already
/// reads the history, as it stood).
pub fn check(at: DateTime<Utc>, include_archive: bool) -> crate::Result<()> {
    if at > Utc::now() {
        return Err(crate::Error::validation("as_of is in the future; retrieval answers for now or a past time"));
    }
    if include_archive {
        return Err(crate::Error::validation(
            "as_of reads the memories active at that time; leave out include_archive",
        ));
    }
    Ok(())
}

/// A memory read as of `at` as it was then: active, its supersession or archiving after `at` not yet happened.
pub fn as_it_was(memory: &mut Memory, at: DateTime<Utc>) {
    memory.status = MemoryStatus::Active;
    if memory.superseded_at.is_some_and(|then| then > at) {
        (memory.superseded_by, memory.superseded_at) = (None, None);
    }
    if memory.archived_at.is_some_and(|then| then > at) {
        memory.archived_at = None;
    }
}
