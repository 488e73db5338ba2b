//! Query embeddings kept in process, keyed by organisation and text (one tenant's queries never answer, or time,
//! another's), and bounded in bytes: the least recently used are dropped first.

use std::sync::Arc;

use uuid::Uuid;

use super::bounded::Bounded;

pub struct QueryCache(Bounded<(Uuid, String), Vec<f32>>);

impl QueryCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self(Bounded::new(capacity_bytes, |(_, text), vector| text.len() + std::mem::size_of_val(vector.as_slice())))
    }

    pub fn get(&self, organization_id: Uuid, text: &str) -> Option<Arc<Vec<f32>>> {
        self.0.get(&(organization_id, text.to_string()))
    }

    pub fn put(&self, organization_id: Uuid, text: &str, vector: Vec<f32>) -> Arc<Vec<f32>> {
        self.0.put((organization_id, text.to_string()), vector)
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.0.used_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_organisation_and_the_bytes_stay_bounded() {
        let one = "query 0".len() + 384 * 4 + super::super::bounded::ENTRY_OVERHEAD;
        let cache = QueryCache::new(10 * one);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        cache.put(a, "query 0", vec![1.0; 384]);
        assert!(cache.get(a, "query 0").is_some());
        assert!(cache.get(b, "query 0").is_none(), "another organisation's query is not a hit");
        for i in 0..100 {
            cache.put(a, &format!("query {i}"), vec![0.0; 384]);
        }
        assert!(cache.used_bytes() <= 10 * one);
        assert!(cache.get(a, "query 99").is_some() && cache.get(a, "query 0").is_none());
    }
}
