//! Recency: how a memory's weight decays with its age, by its type's half-life.

use chrono::{DateTime, Utc};

use crate::domain::MemoryType;

/// Recency half-life: 30 days for episodic and execution summaries, 180 days for everything else.
pub fn half_life_days(memory_type: MemoryType) -> f64 {
    match memory_type {
        MemoryType::Episodic | MemoryType::ExecutionSummary => 30.0,
        MemoryType::Semantic | MemoryType::Procedural | MemoryType::Preference | MemoryType::EntityProfile => 180.0,
    }
}

/// Exponential decay on age: 1 when new, 0.5 after one half-life. Future timestamps count as new.
pub fn recency(created_at: DateTime<Utc>, at: DateTime<Utc>, memory_type: MemoryType) -> f64 {
    let age_days = (at - created_at).num_milliseconds().max(0) as f64 / 86_400_000.0;
    0.5f64.powf(age_days / half_life_days(memory_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn recency_halves_after_one_half_life_per_memory_type() {
        let now = Utc::now();
        let episodic = recency(now - Duration::days(30), now, MemoryType::Episodic);
        let summary = recency(now - Duration::days(30), now, MemoryType::ExecutionSummary);
        let semantic = recency(now - Duration::days(180), now, MemoryType::Semantic);
        let preference = recency(now - Duration::days(90), now, MemoryType::Preference);
        assert!((episodic - 0.5).abs() < 0.001);
        assert!((summary - 0.5).abs() < 0.001);
        assert!((semantic - 0.5).abs() < 0.001);
        assert!((preference - 0.5f64.powf(0.5)).abs() < 0.001);
        assert_eq!(recency(now + Duration::days(3), now, MemoryType::Episodic), 1.0);
    }
}
