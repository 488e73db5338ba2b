//! An in-process cache bounded in bytes: each entry costs what its cost function says, and the least recently used
//! are dropped first once the bound is passed.

use std::{
    hash::Hash,
    sync::{Arc, Mutex},
};

use lru::LruCache;

/// Bytes an entry costs besides what its cost function counts (key, LRU links, allocation headers).
pub const ENTRY_OVERHEAD: usize = 96;

pub struct Bounded<K: Hash + Eq, V> {
    capacity_bytes: usize,
    cost: fn(&K, &V) -> usize,
    /// The entries, least recently used first, and the bytes they hold.
    state: Mutex<(LruCache<K, Arc<V>>, usize)>,
}

impl<K: Hash + Eq, V> Bounded<K, V> {
    pub fn new(capacity_bytes: usize, cost: fn(&K, &V) -> usize) -> Self {
        Self { capacity_bytes, cost, state: Mutex::new((LruCache::unbounded(), 0)) }
    }

    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.get(key).cloned()
    }

    /// Keeps `value` under `key` (unless it alone is over the bound) and returns it shared.
    pub fn put(&self, key: K, value: V) -> Arc<V> {
        let entry_cost = (self.cost)(&key, &value) + ENTRY_OVERHEAD;
        let value = Arc::new(value);
        if entry_cost > self.capacity_bytes {
            return value;
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (entries, used) = &mut *guard;
        if let Some((old_key, old)) = entries.push(key, value.clone()) {
            // The same key's older value, or the least recent entry when the cache is unbounded in count (never).
            *used -= (self.cost)(&old_key, &old) + ENTRY_OVERHEAD;
        }
        *used += entry_cost;
        while *used > self.capacity_bytes {
            let Some((evicted_key, evicted)) = entries.pop_lru() else { break };
            *used -= (self.cost)(&evicted_key, &evicted) + ENTRY_OVERHEAD;
        }
        value
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}
