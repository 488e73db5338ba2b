//! Query embeddings kept in process, keyed by organisation and text (one tenant's queries never answer, or time,
//! another's), and bounded in bytes: the least recently used are dropped first.

use std::sync::{Arc, Mutex};

use lru::LruCache;
use uuid::Uuid;

/// Bytes an entry costs besides its text and vector (key, LRU links, allocation headers).
const ENTRY_OVERHEAD: usize = 96;

/// The entries, least recently used first, and the bytes they hold.
type Entries = (LruCache<(Uuid, String), Arc<Vec<f32>>>, usize);

pub struct QueryCache {
    capacity_bytes: usize,
    state: Mutex<Entries>,
}

fn cost(text: &str, vector: &[f32]) -> usize {
    text.len() + std::mem::size_of_val(vector) + ENTRY_OVERHEAD
}

impl QueryCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self { capacity_bytes, state: Mutex::new((LruCache::unbounded(), 0)) }
    }

    pub fn get(&self, organization_id: Uuid, text: &str) -> Option<Arc<Vec<f32>>> {
        let mut state = self.state.lock().expect("query cache lock");
        state.0.get(&(organization_id, text.to_string())).cloned()
    }

    pub fn put(&self, organization_id: Uuid, text: &str, vector: Vec<f32>) -> Arc<Vec<f32>> {
        let vector = Arc::new(vector);
        let entry_cost = cost(text, &vector);
        if entry_cost > self.capacity_bytes {
            return vector;
        }
        let mut guard = self.state.lock().expect("query cache lock");
        let (entries, used) = &mut *guard;
        if let Some(old) = entries.put((organization_id, text.to_string()), vector.clone()) {
            *used -= cost(text, &old);
        }
        *used += entry_cost;
        while *used > self.capacity_bytes {
            let Some(((_, evicted_text), evicted)) = entries.pop_lru() else { break };
            *used -= cost(&evicted_text, &evicted);
        }
        vector
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.state.lock().expect("query cache lock").1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_organisation_and_the_bytes_stay_bounded() {
        let cache = QueryCache::new(10 * cost("query 0", &[0.0; 384]));
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        cache.put(a, "query 0", vec![1.0; 384]);
        assert!(cache.get(a, "query 0").is_some());
        assert!(cache.get(b, "query 0").is_none(), "another organisation's query is not a hit");
        for i in 0..100 {
            cache.put(a, &format!("query {i}"), vec![0.0; 384]);
        }
        assert!(cache.used_bytes() <= 10 * cost("query 0", &[0.0; 384]));
        assert!(cache.get(a, "query 99").is_some() && cache.get(a, "query 0").is_none());
    }
}
