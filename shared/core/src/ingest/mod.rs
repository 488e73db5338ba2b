//! Ingestion: extraction services hand memories over in batches ([`IngestBatch`]); [`Ingestor::ingest`] checks
//! them, embeds them, and writes them as candidates in one transaction with their taxonomy tags, entity
//! mentions, domain events and follow-up jobs:
//! - a contradiction check per new memory (the check promotes it to `active`, so retrieval sees it only once
//!   checked);
//! - a dedup review when a new memory has an active neighbour of the same readership at cosine ≥ 0.88 (the pair
//!   is deferred for the reviewer);
//! - an entity synthesis each time the active memories mentioning an entity reach a multiple of five (for
//!   candidates, when their checks promote them).
//!
//! A bad memory refuses the whole batch with a reason naming it, and nothing is written. A batch delivered again
//! returns the ids it got the first time; an exact duplicate of a current memory of the same readership (same
//! content hash) is not stored again, its id is returned instead, also when concurrent batches carry the same text.

pub mod export;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use sqlx::PgPool;
use uuid::Uuid;

pub use memory_model::ingest::{
    Checked, EntityRef, ForgetJobType, ForgetRequest, History, IngestBatch, IngestMemory, IngestMessage,
    IngestProvenance, MAX_ANCHOR_BYTES, MAX_CLOCK_SKEW, MAX_CONTENT_BYTES, MAX_CONTEXT_BYTES, MAX_ITEMS, MAX_MEMORIES,
    MAX_NAME_BYTES, MAX_TTL_SECONDS, VERSION, admitted_trust, check, forbids_type, max_confidence, normalise,
};

use crate::{
    config::DEFAULT_WORKER_MODEL_TIMEOUT,
    domain::{MemoryStatus, NewMemory, Readership, Scope, content_hash},
    embed::Embedder,
    jobs::{ContradictionCheckJob, DedupReviewJob, JobType},
    store::{
        self,
        forget::{ForgetSelector, Forgetting},
        transitions,
    },
};

/// Taxonomy nodes an organisation's ingestion creates at most (an operator's `memory-admin taxonomy import` is not
/// capped); past it, memories are tagged with existing nodes only.
pub const MAX_TAXONOMY_NODES: i64 = 500;
/// Cosine similarity from which a new memory and an active one of the same readership are reviewed as
/// near-duplicates.
pub const NEAR_DUPLICATE_COSINE: f64 = 0.88;
/// Neighbours screened per new memory.
const NEAR_DUPLICATE_NEIGHBOURS: i64 = 5;

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestReceipt {
    /// One id per memory of the batch, in order (an exact duplicate gets the existing memory's id).
    pub memory_ids: Vec<Uuid>,
    pub created: usize,
    pub duplicates: usize,
    /// The batch had been ingested before; nothing was written.
    pub replayed: bool,
}

/// How ingested memories start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Admission {
    /// As candidates, promoted by their contradiction check (extraction's hand-off).
    #[default]
    Candidate,
    /// As active memories, without a contradiction check (an operator's curated import).
    Active,
}

/// Whose messages are ingested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producers {
    /// Only a sender registered for the message's organisation (`memory_producer`), and only what its grant allows
    /// it to claim (`MEMORY_PRODUCERS=registered`, what the ingest function runs).
    Registered,
    /// Whoever delivered the message (an operator's own import, tests).
    Any,
}

impl std::str::FromStr for Producers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "registered" => Ok(Self::Registered),
            "any" => Ok(Self::Any),
            other => Err(format!("expected registered or any, not {other:?}")),
        }
    }
}

pub struct Ingestor {
    pool: PgPool,
    embedder: Arc<dyn Embedder>,
    timeout: Duration,
    producers: Producers,
    taxonomy_cap: i64,
    forget_budget: Duration,
}

impl Ingestor {
    pub fn new(pool: PgPool, embedder: Arc<dyn Embedder>) -> Self {
        Self {
            pool,
            embedder,
            timeout: DEFAULT_WORKER_MODEL_TIMEOUT,
            producers: Producers::Any,
            taxonomy_cap: MAX_TAXONOMY_NODES,
            forget_budget: crate::lifecycle::forget::DELIVERY_BUDGET,
        }
    }

    /// Caps the organisation's taxonomy at `nodes` (default [`MAX_TAXONOMY_NODES`]).
    pub fn with_taxonomy_cap(mut self, nodes: i64) -> Self {
        self.taxonomy_cap = nodes;
        self
    }

    /// Checks senders against the producer registry (or not).
    pub fn with_producers(mut self, producers: Producers) -> Self {
        self.producers = producers;
        self
    }

    /// Ingests a batch delivered by `sender` (the SQS `SenderId`) as candidates, if the registry lets the sender
    /// write it: a sender without a grant for the batch's organisation, or claiming more trust than its grant,
    /// is refused with the reason, and nothing is written.
    pub async fn ingest_delivered(&self, batch: &IngestBatch, sender: Option<&str>) -> crate::Result<IngestReceipt> {
        if batch.memories.iter().any(|m| m.history.is_some()) {
            return Err(crate::Error::Forbidden(
                "history (status, supersession) is restored only by a curated import, not from the queue".into(),
            ));
        }
        if self.producers == Producers::Registered {
            let org = batch.organization_id;
            let (sender, max_trust) = self.grant_of(org, sender).await?;
            let max_trust = max_trust.ok_or_else(|| {
                crate::Error::Forbidden(format!("sender {sender} is not registered to write to organisation {org}"))
            })?;
            if let Some((i, m)) = batch.memories.iter().enumerate().find(|(_, m)| {
                crate::domain::readership::forbids_trust(max_trust, m.provenance.trust_level, "claim").is_some()
            }) {
                return Err(crate::Error::Forbidden(format!(
                    "memory {i} claims {} trust; sender {sender} may claim at most {max_trust}",
                    m.provenance.trust_level
                )));
            }
            if let Some(i) = batch.memories.iter().position(|m| m.anchor.is_some()) {
                let mut tx = store::begin_for_org(&self.pool, org).await?;
                let rights = store::producers::rights(&mut *tx, org, sender).await?;
                tx.commit().await?;
                if !rights.imports {
                    return Err(crate::Error::Forbidden(format!(
                        "memory {i} is anchored to a chunk of a file, which only a repository importer writes \
                         (memory-admin producers add --imports); send it without `anchor`"
                    )));
                }
            }
        }
        self.ingest_from(batch, Admission::Candidate, sender).await
    }

    /// What a forget request from `sender` reaches: a sender needs a `verified` grant for the organisation, and
    /// reaches only the memories of batches it sent unless its grant lets it forget any; with `MEMORY_PRODUCERS=any`
    /// every sender reaches everything.
    pub async fn forgetting(
        &self,
        organization_id: Uuid,
        sender: Option<&str>,
        selector: ForgetSelector,
    ) -> crate::Result<Forgetting> {
        if self.producers != Producers::Registered {
            return Ok(Forgetting::all(selector));
        }
        let (sender, grant) = self.grant_of(organization_id, sender).await?;
        if grant != Some(crate::domain::TrustLevel::Verified) {
            return Err(crate::Error::Forbidden(format!(
                "sender {sender} needs a verified grant for organisation {organization_id} to forget"
            )));
        }
        let mut tx = store::begin_for_org(&self.pool, organization_id).await?;
        let rights = store::producers::rights(&mut *tx, organization_id, sender).await?;
        tx.commit().await?;
        Ok(Forgetting { selector, sender: (!rights.forgets_any).then(|| store::producers::role(sender).to_owned()) })
    }

    /// The sender (SQS `SenderId`) of a message and the highest trust its grant for the organisation allows (None:
    /// no grant); a message without a sender is refused.
    async fn grant_of<'s>(
        &self,
        organization_id: Uuid,
        sender: Option<&'s str>,
    ) -> crate::Result<(&'s str, Option<crate::domain::TrustLevel>)> {
        let sender = sender.ok_or_else(|| crate::Error::Forbidden("the message names no sender".into()))?;
        let mut tx = store::begin_for_org(&self.pool, organization_id).await?;
        let grant = store::producers::grant(&mut *tx, organization_id, sender).await?;
        tx.commit().await?;
        Ok((sender, grant))
    }

    /// How long one delivery of a forget request forgets before it leaves the rest to a follow-up job (default
    /// [`crate::lifecycle::forget::DELIVERY_BUDGET`]).
    pub fn with_forget_budget(mut self, budget: Duration) -> Self {
        self.forget_budget = budget;
        self
    }

    pub fn forget_budget(&self) -> Duration {
        self.forget_budget
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Ingests one batch in one transaction (see the module documentation).
    pub async fn ingest(&self, batch: &IngestBatch, admission: Admission) -> crate::Result<IngestReceipt> {
        self.ingest_from(batch, admission, None).await
    }

    /// Ingests a batch `sender` sent (recorded with it, so that its forget requests reach it).
    async fn ingest_from(
        &self,
        batch: &IngestBatch,
        admission: Admission,
        sender: Option<&str>,
    ) -> crate::Result<IngestReceipt> {
        let org = batch.organization_id;
        let mut checked = check(batch).map_err(crate::Error::validation)?;
        for c in &mut checked {
            c.new.sender = sender.map(|s| store::producers::role(s).to_owned());
        }
        let digest = digest(batch);
        let mut tx = store::begin_for_org(&self.pool, org).await?;
        let seen = store::ingest::ingested_batch(&mut tx, org, &batch.batch_id).await?;
        tx.commit().await?;
        if let Some(seen) = seen {
            return replay_or_refuse(batch, &digest, seen);
        }
        let vectors = self.embed(&checked).await?;

        let mut tx = store::begin_for_org(&self.pool, org).await?;
        if let Some(seen) = store::ingest::reserve_batch(&mut tx, org, &batch.batch_id, &digest).await? {
            return replay_or_refuse(batch, &digest, seen);
        }
        // The batch's entities and taxonomy nodes first, in one sorted pass: without row locks on existing ones,
        // so concurrent batches naming the same entities neither queue nor deadlock.
        let mut entity_ids: BTreeMap<(String, String), Uuid> =
            checked.iter().flat_map(|c| c.entities.iter().cloned()).map(|k| (k, Uuid::nil())).collect();
        for ((kind, name), id) in entity_ids.iter_mut() {
            *id = store::entities::ensure(&mut tx, org, kind, name).await?;
        }
        // Taxonomy nodes are names every reader of the organisation sees: only a memory every reader may read, from a
        // source not untrusted, creates them (up to the cap); any other memory is tagged with existing nodes only.
        let creating: BTreeSet<&Vec<String>> =
            checked.iter().filter(|c| creates_taxonomy(&c.new)).flat_map(|c| c.taxonomy.iter()).collect();
        let mut nodes = store::taxonomy::count(&mut *tx, org).await?;
        let mut node_ids: BTreeMap<Vec<String>, Option<Uuid>> =
            checked.iter().flat_map(|c| c.taxonomy.iter().cloned()).map(|p| (p, None)).collect();
        for (path, id) in node_ids.iter_mut() {
            *id = if creating.contains(path) && nodes + path.len() as i64 <= self.taxonomy_cap {
                let node = store::taxonomy::ensure_path(&mut tx, org, path).await?;
                nodes = store::taxonomy::count(&mut *tx, org).await?;
                Some(node)
            } else {
                store::taxonomy::find_path(&mut tx, org, path).await?
            };
        }
        // A file-backed memory's content_hash is its file's, set by its first scan; others carry their text's,
        // which finds exact duplicates, also those a concurrent batch is writing.
        let hashes: Vec<Option<String>> =
            checked.iter().map(|c| c.new.file_path.is_none().then(|| content_hash(c.new.content.as_bytes()))).collect();
        store::ingest::lock_content_hashes(&mut tx, org, &hashes.iter().flatten().cloned().collect()).await?;
        let mut receipt = IngestReceipt { memory_ids: Vec::new(), created: 0, duplicates: 0, replayed: false };
        // The memories this batch makes active (all of them, or its verified chunks), for the synthesis count.
        let mut activated = Vec::new();
        let mut near_duplicates = false;
        // Whether the organisation's partition is ready, read at the batch's first probe.
        let mut partition = None;
        for ((Checked { mut new, taxonomy, entities, past }, vector), hash) in
            checked.into_iter().zip(vectors).zip(hashes)
        {
            let readership = Readership::of_new(&new);
            let chunk = is_verified_chunk(&new);
            // One copy per chunk: a chunk already held stays as it is (the file scan keeps it current). Other
            // memories anchored there (a summary of the chunk, say) are memories of their own.
            if let (Some(anchor), Some(path)) = (&new.anchor, &new.file_path)
                && !past
                && anchor.hash.as_deref() == Some(content_hash(new.content.as_bytes()).as_str())
                && new.scope == Scope::Project
                && let Some(existing) = {
                    store::memories::lock_file(&mut *tx, org, new.project_id, path).await?;
                    let repository = new.repository.as_deref();
                    store::memories::chunk_at(&mut *tx, org, new.project_id, repository, path, &anchor.symbol).await?
                }
            {
                receipt.memory_ids.push(existing);
                receipt.duplicates += 1;
                continue;
            }
            if let Some(hash) = hash {
                if let Some(existing) = store::ingest::find_duplicate(&mut tx, org, &hash, &readership).await? {
                    receipt.memory_ids.push(existing);
                    receipt.duplicates += 1;
                    continue;
                }
                new.content_hash = Some(hash);
            }
            new.embedding = Some(vector);
            new.status = match admission {
                Admission::Candidate => MemoryStatus::Candidate,
                Admission::Active => MemoryStatus::Active,
            };
            let memory = transitions::create(&mut tx, &new, &[]).await?;
            for node in taxonomy.iter().filter_map(|path| node_ids[path]) {
                store::taxonomy::tag(&mut *tx, org, memory.id, node).await?;
            }
            for key in entities {
                let entity = entity_ids[&key];
                store::entities::add_mention(&mut *tx, org, entity, memory.id).await?;
            }
            receipt.memory_ids.push(memory.id);
            receipt.created += 1;
            // A verified chunk of a file is as true as its file, which the file scan checks: it is promoted here,
            // with no contradiction check, and is no near-duplicate to review (two chunks are two places).
            if chunk || (past && admission == Admission::Active) {
                if admission == Admission::Candidate {
                    transitions::promote(&mut tx, org, memory.id).await?;
                    store::memories::mark_checked(&mut *tx, org, memory.id).await?;
                }
                activated.push(memory.id);
                continue;
            }
            if admission == Admission::Candidate {
                let job = ContradictionCheckJob::new(org, memory.id);
                store::jobs::enqueue(&mut *tx, org, JobType::MemoryContradictionCheck, body(job)).await?;
            } else {
                activated.push(memory.id);
            }
            let vector = new.embedding.as_deref().expect("embedded above");
            let ready = match partition {
                Some(ready) => ready,
                None => *partition.insert(store::ann::partition_ready(&mut tx, org).await?),
            };
            let neighbours = store::ingest::near_duplicates(
                &mut tx,
                org,
                memory.id,
                &readership,
                vector,
                NEAR_DUPLICATE_COSINE,
                NEAR_DUPLICATE_NEIGHBOURS,
                ready,
            )
            .await?;
            for (neighbour, cosine) in neighbours {
                near_duplicates |= store::dedup::defer_pair(&mut *tx, org, memory.id, neighbour, cosine).await?;
            }
        }
        // Other candidates become due for synthesis when their checks promote them.
        crate::due::queue_due_syntheses(&mut tx, org, &activated).await?;
        if near_duplicates {
            let job = DedupReviewJob::deferred(org);
            store::jobs::enqueue(&mut *tx, org, JobType::MemoryDedupReview, body(job)).await?;
        }
        store::ingest::complete_batch(&mut tx, org, &batch.batch_id, &receipt.memory_ids).await?;
        tx.commit().await?;
        Ok(receipt)
    }

    async fn embed(&self, checked: &[Checked]) -> crate::Result<Vec<Vec<f32>>> {
        let texts: Vec<String> = checked.iter().map(|c| c.new.embedding_input()).collect();
        Ok(self.embedder.embed_within(&texts, self.timeout).await?)
    }
}

/// Whether a memory may add names to the organisation's taxonomy: read by everyone, from a source not untrusted.
fn creates_taxonomy(memory: &NewMemory) -> bool {
    memory.scope == Scope::Org
        && memory.sensitivity == crate::domain::Sensitivity::Normal
        && memory.provenance.trust_level != crate::domain::TrustLevel::Untrusted
}

/// A job's message body.
fn body(job: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(job).expect("a job serialises")
}

/// What a batch holds, as recorded with its id: its memories' texts, in order, hashed (the texts alone, so the digest
/// does not change with the message format, nor with metadata such as the ref a repository was imported at).
fn digest(batch: &IngestBatch) -> String {
    let texts: Vec<&str> = batch.memories.iter().map(|m| m.content.as_str()).collect();
    content_hash(&serde_json::to_vec(&texts).expect("texts serialise"))
}

/// A batch id seen before: a redelivery gets the ids of the first delivery and changes nothing; other texts under
/// the same id are refused (the message fails, so they are not lost as a "redelivery").
fn replay_or_refuse(
    batch: &IngestBatch,
    digest: &str,
    seen: store::ingest::IngestedBatch,
) -> crate::Result<IngestReceipt> {
    if seen.digest.as_deref().is_some_and(|d| d != digest) {
        return Err(crate::Error::validation(format!(
            "batch_id {:?} was ingested before with other texts; send changed memories under a new batch_id",
            batch.batch_id
        )));
    }
    Ok(IngestReceipt { memory_ids: seen.memory_ids, created: 0, duplicates: 0, replayed: true })
}

/// Whether a memory is a verified copy of a chunk of a file: a semantic, project-scoped memory, file-backed, anchored
/// by its own text's hash, named by its file's blob SHA. Its first scan compares its text with the chunk the file
/// has at its anchor, and replaces it with that chunk's when they differ.
pub(crate) fn is_verified_chunk(memory: &NewMemory) -> bool {
    memory.memory_type == crate::domain::MemoryType::Semantic
        && memory.provenance.source_kind == crate::domain::SourceKind::File
        && memory.provenance.trust_level == crate::domain::TrustLevel::Verified
        && memory.scope == Scope::Project
        && memory.file_path.is_some()
        && memory.content_hash.as_deref().is_some_and(crate::repository::reader::is_blob_sha)
        && memory.anchor.as_ref().and_then(|a| a.hash.as_deref())
            == Some(content_hash(memory.content.as_bytes()).as_str())
}
