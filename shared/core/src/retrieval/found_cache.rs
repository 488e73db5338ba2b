//! What Stage 1 found, kept in process under the organisation's generation: a request whose organisation has not
//! changed since (no write, transition or forget committed: the generation counts them, migrations/0004) and that
//! asks the same of the branches (the same text, readership, filters and settings) takes the kept candidates
//! instead of asking the database again. Everything after Stage 1 runs as it would: the cooldown, the
//! classification, the floor, the ranking (recency measured now) and the budget. A kept set is not used past the
//! earliest expiry among its candidates, when the branches would have left that memory out.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    bounded::Bounded,
    found::{Blend, Found},
};

/// The organisation, its generation, and everything else the branches were asked.
pub type Key = (Uuid, i64, String);

/// The candidates and their blend as Stage 1 fused them.
pub struct Kept {
    pub candidates: Vec<Found>,
    pub blend: Blend,
    /// The earliest expiry to come among the candidates.
    valid_until: Option<DateTime<Utc>>,
}

/// Bytes a candidate costs besides its text (the memory's other fields, the scores).
const CANDIDATE_OVERHEAD: usize = 1024;

pub struct FoundCache(Bounded<Key, Kept>);

impl FoundCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self(Bounded::new(capacity_bytes, |(_, _, asked), kept| {
            asked.len() + kept.candidates.iter().map(|c| c.memory.content.len() + CANDIDATE_OVERHEAD).sum::<usize>()
        }))
    }

    /// The kept set, while none of its candidates has expired; counted as a hit or a miss.
    pub fn get(&self, key: &Key) -> Option<std::sync::Arc<Kept>> {
        let kept = self.0.get(key).filter(|kept| kept.valid_until.is_none_or(|until| Utc::now() < until));
        let outcome = if kept.is_some() { "hit" } else { "miss" };
        metrics::counter!("retrieval_found_cache", "outcome" => outcome).increment(1);
        kept
    }

    pub fn put(&self, key: Key, candidates: Vec<Found>, blend: Blend) {
        // A candidate already expired (the archive, or the store as of a past time) stays one.
        let now = Utc::now();
        let valid_until = candidates.iter().filter_map(|c| c.memory.expires_at).filter(|&at| at > now).min();
        self.0.put(key, Kept { candidates, blend, valid_until });
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.0.used_bytes()
    }
}
