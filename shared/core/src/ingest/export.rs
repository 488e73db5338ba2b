//! An organisation's memories as ingest messages (`memory-admin export`): each memory, active or history
//! (superseded, archived), with its provenance, times, scope, context, tags, labels, taxonomy paths, entities, for a
//! file-backed one its file, repository and anchor, and its `history` (its id, status and successor there);
//! ingesting the file into an empty organisation (`memory-admin ingest --direct --activate`, which then restores
//! the history with [`restore_history`]) gives the same retrieval results and the same supersession chains. Entity
//! profiles are left out (synthesis writes them again from their sources).

use std::collections::BTreeMap;

use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{EntityRef, History, IngestBatch, IngestMemory, IngestProvenance, IngestReceipt, MAX_MEMORIES, VERSION};
use crate::{
    domain::{SourceKind, TrustLevel},
    lifecycle::guarded,
    repository::reader::is_blob_sha,
    store,
};

/// Whether the write gate takes this source kind from a producer.
fn ingestible(kind: SourceKind) -> bool {
    let probe = IngestProvenance {
        source_kind: kind,
        source_ref: String::new(),
        git_blob_sha: None,
        trust_level: TrustLevel::Unverified,
    };
    super::admitted_trust(&probe).is_ok()
}

/// Hands the organisation's memories to `write` as batches for `to_organization` (the same organisation, or
/// another), each as soon as its memories are read: one statement's snapshot, streamed, so an organisation of any
/// size is exported holding one batch. Returns how many memories it exported.
pub async fn export(
    pool: &sqlx::PgPool,
    organization_id: Uuid,
    to_organization: Uuid,
    mut write: impl FnMut(IngestBatch) -> anyhow::Result<()>,
) -> crate::Result<usize> {
    let batch = |memories: Vec<IngestMemory>| IngestBatch {
        job_type: None,
        version: VERSION,
        organization_id: to_organization,
        // Named by what it holds: the same memories replay, changed ones are a new batch.
        batch_id: format!("export:{:x}", Sha256::digest(serde_json::to_vec(&memories).expect("memories serialise"))),
        memories,
    };
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    let (mut exported, mut pending) = (0, Vec::with_capacity(MAX_MEMORIES));
    {
        let mut rows = store::export::memories(&mut tx, organization_id);
        while let Some(row) = rows.try_next().await? {
            pending.push(as_ingest(row));
            exported += 1;
            if pending.len() == MAX_MEMORIES {
                write(batch(std::mem::take(&mut pending)))?;
            }
        }
    }
    tx.commit().await?;
    if !pending.is_empty() {
        write(batch(pending))?;
    }
    Ok(exported)
}

fn as_ingest(row: store::export::ExportedMemory) -> IngestMemory {
    let m = row.memory;
    // A file's blob SHA is stored as its hash; ingest appends it to the source reference again.
    let blob = m.content_hash.clone().filter(|h| m.file_backed && is_blob_sha(h));
    let mut source_ref = m.provenance.source_ref.clone().unwrap_or_else(|| format!("memory:{}", m.id));
    if let Some(sha) = &blob
        && let Some(stripped) = source_ref.strip_suffix(&format!("@{sha}"))
    {
        source_ref = stripped.to_string();
    }
    let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let labels: BTreeMap<String, String> =
        m.labels.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), text(v))).collect()).unwrap_or_default();
    IngestMemory {
        content: m.content,
        context: row.context,
        memory_type: m.memory_type,
        scope: m.scope,
        project_id: m.project_id,
        task_id: m.project_task_id,
        agent_id: m.agent_id,
        sensitivity: m.sensitivity,
        confidence: m.confidence,
        expires_at: m.expires_at,
        ttl_seconds: None,
        tags: m.tags.into_iter().take(super::MAX_ITEMS).collect(),
        labels: labels.into_iter().take(super::MAX_ITEMS).collect(),
        taxonomy: row.taxonomy,
        entities: row.entities.0.into_iter().map(|(kind, name)| EntityRef { name, kind }).collect(),
        created_at: Some(m.created_at),
        file_path: m.file_path,
        repository: m.repository,
        anchor: m.anchor,
        history: Some(History { id: m.id, status: m.status, superseded_by: m.superseded_by }),
        provenance: IngestProvenance {
            // What the service made itself (a merge, a synthesis) or took in before the write gate comes back as an
            // import of its kind and reference.
            source_kind: if ingestible(m.provenance.source_kind) {
                m.provenance.source_kind
            } else {
                SourceKind::Import
            },
            source_ref: if ingestible(m.provenance.source_kind) {
                source_ref
            } else {
                format!("{}:{source_ref}", m.provenance.source_kind)
            },
            git_blob_sha: blob,
            trust_level: m.provenance.trust_level,
        },
    }
}

/// After a curated import of exported `batches` (their `receipts` in order): the memories that were superseded or
/// archived where they came from are so again, superseded by the copies of their successors through the guarded
/// transition (a supersession the readership and trust rules forbid is held for review, as a lifecycle job's
/// would be). Returns how many were restored.
pub async fn restore_history(
    pool: &sqlx::PgPool,
    organization_id: Uuid,
    batches: &[IngestBatch],
    receipts: &[IngestReceipt],
) -> crate::Result<usize> {
    let mut copy_of = std::collections::HashMap::new();
    // A copy that an exported active memory also landed on (the same text and readers, stored once) stays current,
    // whatever the history of the others that share it.
    let mut current_copies = std::collections::HashSet::new();
    for (batch, receipt) in batches.iter().zip(receipts) {
        for (memory, id) in batch.memories.iter().zip(&receipt.memory_ids) {
            if let Some(history) = &memory.history {
                copy_of.insert(history.id, *id);
                if history.status == crate::domain::MemoryStatus::Active {
                    current_copies.insert(*id);
                }
            }
        }
    }
    let mut tx = store::begin_for_org(pool, organization_id).await?;
    let mut restored = 0;
    let histories = batches.iter().flat_map(|b| &b.memories).filter_map(|m| m.history.as_ref());
    for history in histories {
        let Some(&copy) = copy_of.get(&history.id).filter(|copy| !current_copies.contains(*copy)) else { continue };
        let successor = history.superseded_by.and_then(|s| copy_of.get(&s)).copied().filter(|s| *s != copy);
        let ids: Vec<Uuid> = [Some(copy), successor].into_iter().flatten().collect();
        let locked = store::transitions::lock(&mut tx, organization_id, &ids).await?;
        let Some(current) = locked.iter().find(|m| m.id == copy && m.status == crate::domain::MemoryStatus::Active)
        else {
            continue; // restored before (a second import), or not a memory of this import
        };
        match (history.status, successor.and_then(|s| locked.iter().find(|m| m.id == s))) {
            (crate::domain::MemoryStatus::Superseded, Some(winner)) => {
                let outcome = guarded::supersede(&mut tx, guarded::Decider::Import, winner, current, "import").await?;
                if matches!(outcome, guarded::Outcome::Held(_)) {
                    continue;
                }
            }
            (crate::domain::MemoryStatus::Superseded | crate::domain::MemoryStatus::Archived, _) => {
                store::transitions::archive(&mut tx, organization_id, copy, "import").await?;
            }
            _ => continue,
        }
        restored += 1;
    }
    tx.commit().await?;
    Ok(restored)
}
