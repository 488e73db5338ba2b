//! Entity synthesis: once an entity has enough mentions, the model writes a profile from the memories that
//! mention it; the profile is stored as an `entity_profile` memory and linked from `memory_entity` in the same
//! transaction.

use std::sync::Arc;

use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    domain::{EntityProfile, Memory, MemoryType, NewMemory, Scope, Sensitivity, SourceKind},
    embed::Embedder,
    llm::{InvocationPurpose, Llm, LlmRequest},
    store,
};

/// Mentions at which an entity's profile is (re)synthesised.
pub const MENTION_THRESHOLD: i64 = 5;

pub struct EntitySynthesizer {
    llm: Arc<dyn Llm>,
    embedder: Option<Arc<dyn Embedder>>,
}

impl EntitySynthesizer {
    pub fn new(llm: Arc<dyn Llm>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        Self { llm, embedder }
    }

    /// Synthesises the profile when the entity has at least [`MENTION_THRESHOLD`] mentions; None otherwise.
    pub async fn synthesize_if_due(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        entity_id: Uuid,
    ) -> crate::Result<Option<EntityProfile>> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let mentions = store::entities::mention_count(&mut *tx, organization_id, entity_id).await?;
        tx.commit().await?;
        if mentions < MENTION_THRESHOLD {
            return Ok(None);
        }
        self.synthesize_profile(pool, organization_id, entity_id).await.map(Some)
    }

    /// Synthesises the profile now (explicit compaction runs), replacing any previous one.
    pub async fn synthesize_profile(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        entity_id: Uuid,
    ) -> crate::Result<EntityProfile> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let entity = store::entities::get(&mut *tx, organization_id, entity_id)
            .await?
            .ok_or(crate::Error::NotFound { kind: "entity", id: entity_id })?;
        let sources = store::entities::active_mentioning(&mut *tx, organization_id, entity_id).await?;
        let Some(most_specific) = sources.iter().max_by_key(|m| specificity(m.scope)) else {
            return Err(crate::Error::validation(format!("entity {entity_id} has no active memories to synthesise")));
        };
        let listing: String = sources.iter().map(|m| format!("- {}\n", m.content)).collect();
        let summary = self
            .llm
            .complete(LlmRequest {
                purpose: InvocationPurpose::MemorySynthesis,
                system: "Write a concise profile of the entity from these memories: what it is, how it is used, \
                         and any rules or preferences about it. Answer with the profile text only."
                    .into(),
                prompt: format!("Entity: {} ({})\nMemories:\n{listing}", entity.name, entity.entity_type),
                max_tokens: 500,
            })
            .await?;

        let mut new = NewMemory::replacing(most_specific, summary.trim());
        new.memory_type = MemoryType::EntityProfile;
        new.sensitivity = if sources.iter().any(|m| m.sensitivity == Sensitivity::Restricted) {
            Sensitivity::Restricted
        } else {
            Sensitivity::Normal
        };
        new.confidence = sources.iter().map(|m| m.confidence).sum::<f64>() / sources.len() as f64;
        new.provenance.source_kind = SourceKind::Synthesis;
        new.provenance.source_ref = Some(format!("entity:{entity_id}"));
        new.file_path = None;
        if let Some(embedder) = &self.embedder {
            new.embedding = Some(embedder.embed_one(&new.content).await?);
        }
        let profile = store::memories::insert(&mut *tx, &new).await?;
        if let Some(previous) = entity.synthesis_memory_id {
            store::memories::supersede(&mut *tx, organization_id, previous, profile.id).await?;
        }
        store::entities::set_synthesis(&mut *tx, organization_id, entity_id, profile.id).await?;
        let payload = serde_json::json!({ "entity_id": entity_id, "memory_id": profile.id });
        store::outbox::append(&mut *tx, organization_id, "entity.synthesized", payload).await?;
        tx.commit().await?;
        Ok(EntityProfile { entity_id, name: entity.name, entity_type: entity.entity_type, profile })
    }

    /// The entity's current profile memory, or None before its first synthesis.
    pub async fn get_profile(
        &self,
        pool: &PgPool,
        organization_id: Uuid,
        entity_id: Uuid,
    ) -> crate::Result<Option<Memory>> {
        let mut tx = store::begin_for_org(pool, organization_id).await?;
        let entity = store::entities::get(&mut *tx, organization_id, entity_id).await?;
        let profile = match entity.and_then(|e| e.synthesis_memory_id) {
            Some(id) => store::memories::get(&mut *tx, organization_id, id).await?,
            None => None,
        };
        tx.commit().await?;
        Ok(profile)
    }
}

/// Higher is narrower: a profile is as private as its most private source.
fn specificity(scope: Scope) -> u8 {
    match scope {
        Scope::Org => 0,
        Scope::Project => 1,
        Scope::Task => 2,
        Scope::AgentPrivate => 3,
    }
}
