//! LLM cluster dedup: near-duplicate pairs (cosine ≥ 0.88, screened at extraction) reviewed by the model in
//! batches of at most ten, each decision applied in one transaction with its outbox events.

use std::sync::Arc;

use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    domain::{DedupDecision, Memory, NewMemory, SourceKind},
    embed::Embedder,
    llm::{InvocationPurpose, Llm, LlmError, LlmRequest, parse_json},
    store,
};

/// Pairs reviewed per model call.
pub const PAIRS_PER_CALL: usize = 10;

/// Two memories suspected to say the same thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupPair {
    pub a: Uuid,
    pub b: Uuid,
}

pub struct Deduper {
    llm: Arc<dyn Llm>,
    embedder: Option<Arc<dyn Embedder>>,
}

#[derive(Deserialize)]
struct Verdicts {
    decisions: Vec<Verdict>,
}

#[derive(Deserialize)]
struct Verdict {
    pair: usize,
    decision: DedupDecision,
}

impl Deduper {
    /// `embedder` embeds merged memories (without one they are stored unembedded).
    pub fn new(llm: Arc<dyn Llm>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        Self { llm, embedder }
    }

    /// Reviews the pairs of one organisation and applies the decisions, one transaction per model call.
    pub async fn review_cluster(&self, pool: &PgPool, organization_id: Uuid, pairs: &[DedupPair]) -> crate::Result<()> {
        for batch in pairs.chunks(PAIRS_PER_CALL) {
            let mut tx = store::begin_for_org(pool, organization_id).await?;
            self.review_batch(&mut tx, organization_id, batch).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// Claims up to one model call's worth of deferred pairs (other workers skip them) and reviews them in the
    /// same transaction; returns how many were reviewed.
    pub async fn review_deferred(&self, pool: &PgPool, organization_id: Uuid) -> crate::Result<usize> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let claimed = store::dedup::claim_deferred(&mut tx, organization_id, PAIRS_PER_CALL as i64).await?;
        let pairs: Vec<DedupPair> = claimed.iter().map(|p| DedupPair { a: p.memory_a_id, b: p.memory_b_id }).collect();
        if !pairs.is_empty() {
            self.review_batch(&mut tx, organization_id, &pairs).await?;
        }
        tx.commit().await?;
        Ok(pairs.len())
    }

    async fn review_batch(
        &self,
        tx: &mut sqlx::PgConnection,
        organization_id: Uuid,
        batch: &[DedupPair],
    ) -> crate::Result<()> {
        let mut loaded = Vec::new();
        for pair in batch {
            let a = store::memories::get(&mut *tx, organization_id, pair.a).await?;
            let b = store::memories::get(&mut *tx, organization_id, pair.b).await?;
            match (a, b) {
                (Some(a), Some(b)) => loaded.push((a, b)),
                _ => {
                    return Err(crate::Error::validation(format!(
                        "pair {} / {} names an unknown memory",
                        pair.a, pair.b
                    )));
                }
            }
        }
        let listing: String = loaded
            .iter()
            .enumerate()
            .map(|(i, (a, b))| format!("Pair {i}:\nA: {}\nB: {}\n", a.content, b.content))
            .collect();
        let answer = self
            .llm
            .complete(LlmRequest {
                purpose: InvocationPurpose::MemoryDedup,
                system: "For each pair of memories decide: keep_both (they differ), merge (same fact, both add \
                         detail), supersede_a (B replaces A), supersede_b (A replaces B). Answer JSON only: \
                         {\"decisions\": [{\"pair\": 0, \"decision\": \"keep_both\"}, ...]}"
                    .into(),
                prompt: listing,
                max_tokens: 400,
            })
            .await?;
        let verdicts: Verdicts = parse_json(&answer)?;
        for (i, (a, b)) in loaded.iter().enumerate() {
            let decision = verdicts
                .decisions
                .iter()
                .find(|v| v.pair == i)
                .map(|v| v.decision)
                .filter(|d| *d != DedupDecision::Deferred)
                .ok_or_else(|| LlmError::Malformed(format!("no decision for pair {i}")))?;
            match decision {
                DedupDecision::SupersedeA => supersede(tx, a, b.id).await?,
                DedupDecision::SupersedeB => supersede(tx, b, a.id).await?,
                DedupDecision::Merge => {
                    let merged = self.merge(tx, a, b).await?;
                    supersede(tx, a, merged).await?;
                    supersede(tx, b, merged).await?;
                }
                DedupDecision::KeepBoth | DedupDecision::Deferred => {}
            }
            // Stored in canonical order (smaller id first): swap the direction of a supersession with it.
            let (first, second, stored) = if a.id < b.id {
                (a.id, b.id, decision)
            } else {
                let flipped = match decision {
                    DedupDecision::SupersedeA => DedupDecision::SupersedeB,
                    DedupDecision::SupersedeB => DedupDecision::SupersedeA,
                    other => other,
                };
                (b.id, a.id, flipped)
            };
            store::dedup::record_decision(&mut *tx, organization_id, first, second, stored).await?;
        }
        Ok(())
    }

    /// Asks the model for the merged text and stores it as a new memory with both sources' scope.
    async fn merge(&self, tx: &mut sqlx::PgConnection, a: &Memory, b: &Memory) -> crate::Result<Uuid> {
        let content = self
            .llm
            .complete(LlmRequest {
                purpose: InvocationPurpose::MemoryMerge,
                system: "Merge the two memories into one self-contained statement that keeps every detail. \
                         Answer with the merged text only."
                    .into(),
                prompt: format!("A: {}\nB: {}", a.content, b.content),
                max_tokens: 400,
            })
            .await?;
        let mut new = NewMemory::replacing(a, content.trim());
        new.confidence = a.confidence.max(b.confidence);
        new.provenance.source_kind = SourceKind::Merge;
        new.provenance.source_ref = Some(format!("merge:{},{}", a.id, b.id));
        if let Some(embedder) = &self.embedder {
            new.embedding = Some(embedder.embed_one(&new.content).await?);
        }
        Ok(store::memories::insert(&mut *tx, &new).await?.id)
    }
}

async fn supersede(tx: &mut sqlx::PgConnection, loser: &Memory, winner: Uuid) -> crate::Result<()> {
    if store::memories::supersede(&mut *tx, loser.organization_id, loser.id, winner).await? == 1 {
        let payload = serde_json::json!({ "memory_id": loser.id, "superseded_by": winner });
        store::outbox::append(&mut *tx, loser.organization_id, "memory.superseded", payload).await?;
    }
    Ok(())
}
