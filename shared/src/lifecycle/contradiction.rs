//! Contradiction detection for a new (or re-checked) memory.
//!
//! Pre-screen: active memories that mention one of the same entities and sit in the cosine band 0.70-0.87 (below
//! near-duplicate, close enough to disagree). The model labels each contradictory, redundant or independent.
//! For each contradiction:
//! - a high-confidence new memory (> 0.85) supersedes the existing one;
//! - otherwise the existing memory loses 0.1 confidence (archived when it reaches 0) and so does the new one;
//!   a new memory left below 0.2 stays (or becomes) a candidate instead of being promoted to active.
//!
//! Each pair is recorded once, so a redelivered job changes nothing twice.

use std::sync::Arc;

use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    domain::{Memory, MemoryStatus},
    llm::{InvocationPurpose, Llm, LlmError, LlmRequest, parse_json},
    store,
};

/// Lower bound of the cosine band screened for contradictions.
pub const MIN_COSINE: f64 = 0.70;
/// Upper bound: above it a pair is a near-duplicate, handled by dedup.
pub const MAX_COSINE: f64 = 0.87;
/// New memories above this confidence supersede what they contradict.
pub const SUPERSEDE_CONFIDENCE: f64 = 0.85;
/// Confidence lost by each side of a contradiction.
pub const PENALTY: f64 = 0.1;
/// A new memory below this confidence is not promoted to active.
pub const PROMOTION_CONFIDENCE: f64 = 0.2;
/// Pairs screened per check (one model call).
const MAX_CANDIDATES: i64 = 10;

pub struct ContradictionDetector {
    llm: Arc<dyn Llm>,
}

#[derive(Deserialize)]
struct Relations {
    relations: Vec<Relation>,
}

#[derive(Deserialize)]
struct Relation {
    memory: usize,
    relation: String,
}

impl ContradictionDetector {
    pub fn new(llm: Arc<dyn Llm>) -> Self {
        Self { llm }
    }

    /// Checks `memory_id` against existing memories, applies the confidence rules, and returns the existing
    /// memories it contradicts (as they were before the changes).
    pub async fn check(&self, pool: &PgPool, organization_id: Uuid, memory_id: Uuid) -> crate::Result<Vec<Memory>> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let new = store::contradiction::lock_memory(&mut tx, organization_id, memory_id)
            .await?
            .ok_or(crate::Error::NotFound { kind: "memory", id: memory_id })?;
        let candidates = store::contradiction::unreviewed_candidates(
            &mut tx,
            organization_id,
            memory_id,
            MIN_COSINE,
            MAX_COSINE,
            MAX_CANDIDATES,
        )
        .await?;
        if candidates.is_empty() {
            self.settle(&mut tx, &new, new.confidence).await?;
            tx.commit().await?;
            return Ok(Vec::new());
        }

        let relations = self.classify(&new, &candidates).await?;
        let mut contradicted = Vec::new();
        let mut new_confidence = new.confidence;
        for (candidate, relation) in candidates.iter().zip(relations) {
            let existing = &candidate.memory;
            if !store::contradiction::record(&mut *tx, organization_id, new.id, existing.id, &relation).await?
                || relation != "contradictory"
            {
                continue;
            }
            if new.confidence > SUPERSEDE_CONFIDENCE {
                store::memories::supersede(&mut *tx, organization_id, existing.id, new.id).await?;
                let payload = serde_json::json!({ "memory_id": existing.id, "superseded_by": new.id });
                store::outbox::append(&mut *tx, organization_id, "memory.superseded", payload).await?;
            } else {
                let lowered = (existing.confidence - PENALTY).max(0.0);
                if lowered < 1e-9 {
                    store::memories::set_confidence_and_status(
                        &mut *tx,
                        organization_id,
                        existing.id,
                        0.0,
                        existing.status,
                    )
                    .await?;
                    store::memories::archive(&mut *tx, organization_id, existing.id).await?;
                    let payload = serde_json::json!({ "memory_id": existing.id, "reason": "contradicted" });
                    store::outbox::append(&mut *tx, organization_id, "memory.archived", payload).await?;
                } else {
                    store::memories::set_confidence_and_status(
                        &mut *tx,
                        organization_id,
                        existing.id,
                        lowered,
                        existing.status,
                    )
                    .await?;
                }
                new_confidence -= PENALTY;
            }
            contradicted.push(existing.clone());
        }
        self.settle(&mut tx, &new, new_confidence).await?;
        tx.commit().await?;
        Ok(contradicted)
    }

    /// Writes the new memory's confidence and promotes it to active, or keeps it a candidate below 0.2.
    async fn settle(&self, tx: &mut sqlx::PgConnection, new: &Memory, confidence: f64) -> crate::Result<()> {
        let confidence = confidence.max(0.0);
        let status = match new.status {
            MemoryStatus::Candidate | MemoryStatus::Active if confidence < PROMOTION_CONFIDENCE => {
                MemoryStatus::Candidate
            }
            MemoryStatus::Candidate | MemoryStatus::Active => MemoryStatus::Active,
            other => other,
        };
        if status != new.status || (confidence - new.confidence).abs() > f64::EPSILON {
            store::memories::set_confidence_and_status(&mut *tx, new.organization_id, new.id, confidence, status)
                .await?;
        }
        Ok(())
    }

    async fn classify(
        &self,
        new: &Memory,
        candidates: &[store::contradiction::SimilarMemory],
    ) -> crate::Result<Vec<String>> {
        let listing: String =
            candidates.iter().enumerate().map(|(i, c)| format!("Existing {i}: {}\n", c.memory.content)).collect();
        let answer = self
            .llm
            .complete(LlmRequest {
                purpose: InvocationPurpose::MemoryContradiction,
                system: "Compare the new memory with each existing memory. Label each pair contradictory (both \
                         cannot be true), redundant (same information) or independent. Answer JSON only: \
                         {\"relations\": [{\"memory\": 0, \"relation\": \"independent\"}, ...]}"
                    .into(),
                prompt: format!("New: {}\n{listing}", new.content),
                max_tokens: 300,
            })
            .await?;
        let parsed: Relations = parse_json(&answer)?;
        (0..candidates.len())
            .map(|i| {
                let relation = parsed
                    .relations
                    .iter()
                    .find(|r| r.memory == i)
                    .map(|r| r.relation.trim().to_lowercase())
                    .ok_or_else(|| LlmError::Malformed(format!("no relation for existing memory {i}")))?;
                match relation.as_str() {
                    "contradictory" | "redundant" | "independent" => Ok(relation),
                    other => Err(LlmError::Malformed(format!("unknown relation {other:?}")).into()),
                }
            })
            .collect()
    }
}
