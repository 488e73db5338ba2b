//! Forgetting leaves nothing behind: after a memory was merged (and the merge merged again), profiled in several
//! versions and partitions, packed into the keyword lists and reviewed, forgetting it leaves its text and its
//! distinctive words in no row of any table. The oracle reads the tables and their columns from
//! `information_schema`, so a table added later is covered without editing it.

use std::sync::Arc;

use integration_tests::Db;
use memory_core::{
    domain::{MemoryStatus, MemoryType, NewMemory, SourceKind},
    embed::Embedder,
    ingest::{Admission, IngestBatch, Ingestor},
    lifecycle::{
        forget::{ForgetSelector, forget},
        synthesis::EntitySynthesizer,
    },
    llm::{InvocationPurpose, ScriptedLlm},
    store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

async fn reload(db: &Db, org: Uuid, id: Uuid) -> memory_core::domain::Memory {
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::memories::get(&mut *tx, org, id).await.unwrap().unwrap()
}

/// Every row of every table (text, json, arrays, tsvectors as text; bytea as bytes) that holds one of `needles`
/// (case-insensitive): `table.column` with the number of such rows.
async fn rows_holding(db: &Db, needles: &[&str]) -> Vec<(String, i64)> {
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.table_name::text, c.column_name::text, c.udt_name::text FROM information_schema.columns c \
         JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
         WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' \
           AND (c.data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY', 'bytea') \
                OR c.udt_name = 'tsvector') \
         ORDER BY 1, 2",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(columns.len() > 20, "the catalogue lists the tables' columns: {columns:?}");
    let mut found = Vec::new();
    for (table, column, kind) in columns {
        let mut count = 0i64;
        if kind == "bytea" {
            let mut patterns: Vec<Vec<u8>> = needles.iter().map(|n| n.as_bytes().to_vec()).collect();
            patterns.extend(needles.iter().map(|n| n.to_uppercase().into_bytes()));
            for pattern in patterns {
                let sql = format!("SELECT count(*) FROM \"{table}\" WHERE position($1::bytea IN \"{column}\") > 0");
                count += sqlx::query_scalar::<_, i64>(&sql).bind(pattern).fetch_one(&db.admin).await.unwrap();
            }
        } else {
            for needle in needles {
                let sql = format!("SELECT count(*) FROM \"{table}\" WHERE \"{column}\"::text ILIKE '%' || $1 || '%'");
                count += sqlx::query_scalar::<_, i64>(&sql).bind(*needle).fetch_one(&db.admin).await.unwrap();
            }
        }
        if count > 0 {
            found.push((format!("{table}.{column}"), count));
        }
    }
    found
}

/// The memory's text, its context, tags, taxonomy path and an entity only it names, after two profile versions of
/// one partition, a profile archived when its partition's sources went, a merge of a merge, dedup, contradiction
/// and held review rows, and packed keyword lists: after `forget`, none of its words is in any row, the keyword
/// index has no list or statistics row of them, its batch keeps no digest of its texts, and a redelivery of that
/// batch writes nothing.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_forgotten_memory_leaves_no_word_in_any_row_whatever_was_derived_from_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let project = Uuid::now_v7();
    let embedder = integration_tests::minilm();
    let ingestor = Ingestor::new(db.app.clone(), embedder.clone());
    let secret = "The quokka ledger codeword is PLUMBLINE-7731";
    let needles = ["quokka", "plumblin", "ledger"];
    let memory = |content: &str, extra: serde_json::Value| {
        let mut m = serde_json::json!({"content": content, "memory_type": "semantic", "scope": "org",
            "entities": [{"name": "zebra-vault", "kind": "service"}],
            "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}});
        m.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        m
    };
    let first: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": "first",
        "memories": [
            memory(secret, serde_json::json!({"context": "said at the quokka standup", "tags": ["quokka-desk"],
                "labels": {"desk": "quokka"}, "taxonomy": ["ledgers/quokka"],
                "entities": [{"name": "zebra-vault", "kind": "service"}, {"name": "plumbline-desk", "kind": "team"}]})),
            memory("zebra-vault rotates its keys every month", serde_json::json!({}))]}))
    .unwrap();
    let ids = ingestor.ingest(&first, Admission::Active).await.unwrap().memory_ids;
    let (forgotten, sibling) = (ids[0], ids[1]);

    let parrot = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |request| {
        Ok(memory_core::llm::quoted_texts(&request.prompt).join(" "))
    }));
    let synthesizer = EntitySynthesizer::new(parrot, Some(embedder.clone()));
    let vault: Uuid =
        sqlx::query_scalar("SELECT id FROM memory_entity WHERE organization_id = $1 AND name = 'zebra-vault'")
            .bind(org)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    synthesizer.synthesize_profile(&db.app, org, vault).await.unwrap();
    // A second version of the organisation's profile, and a profile of a project partition.
    let second: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": "second",
        "memories": [
            memory("zebra-vault runs in eu-west-1", serde_json::json!({})),
            memory("zebra-vault's runbook is in the ops wiki", serde_json::json!({"scope": "project", "project_id": project}))]}))
    .unwrap();
    let later = ingestor.ingest(&second, Admission::Active).await.unwrap().memory_ids;
    synthesizer.synthesize_profile(&db.app, org, vault).await.unwrap();
    // The project memory goes: its partition's profile is archived (sources gone) and stays as history.
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::transitions::archive(&mut tx, org, later[1], "expired").await.unwrap();
    tx.commit().await.unwrap();
    synthesizer.synthesize_profile(&db.app, org, vault).await.unwrap();
    let profiles: Vec<(String, String)> = sqlx::query_as(
        "SELECT status, coalesce(archived_at::text, '') FROM memory WHERE organization_id = $1 \
         AND memory_type = 'entity_profile' AND content LIKE '%quokka%' ORDER BY created_at",
    )
    .bind(org)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    let statuses: Vec<&str> = profiles.iter().map(|(s, _)| s.as_str()).collect();
    assert!(statuses.contains(&"superseded") && statuses.contains(&"archived"), "{statuses:?}");

    // A merge of the memory and its sibling, and a merge of that merge with the third memory.
    let merge = async |text: &str, sources: [Uuid; 2]| -> Uuid {
        let mut merged = NewMemory::new(org, MemoryType::Semantic, text.to_string());
        merged.provenance.source_kind = SourceKind::Merge;
        merged.embedding = Some(embedder.embed_one(text).await.unwrap());
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        let merged = store::transitions::create(&mut tx, &merged, &sources).await.unwrap();
        for source in sources {
            store::transitions::supersede(&mut tx, org, source, merged.id, "dedup_merge").await.unwrap();
        }
        tx.commit().await.unwrap();
        merged.id
    };
    let once =
        merge("zebra-vault: quokka ledger codeword PLUMBLINE-7731; keys rotate monthly", [forgotten, sibling]).await;
    merge("zebra-vault: quokka ledger codeword PLUMBLINE-7731, monthly keys, eu-west-1", [once, later[0]]).await;
    // Review rows that name it, with reasons that quote it.
    for sql in [
        "INSERT INTO memory_dedup_pair (organization_id, memory_a_id, memory_b_id, cosine_similarity, decision, reason) \
         VALUES ($1, $2, $3, 0.9, 'merge', 'both give the quokka ledger codeword')",
        "INSERT INTO memory_held_decision (organization_id, id, job, action, memory_id, other_memory_id, reason) \
         VALUES ($1, gen_random_uuid(), 'dedup', 'merge', $2, $3, 'the quokka ledger is sensitive')",
        "INSERT INTO memory_contradiction_reviewed (organization_id, new_memory_id, existing_memory_id, relation) \
         VALUES ($1, $2, $3, 'independent')",
    ] {
        sqlx::query(sql).bind(org).bind(forgotten).bind(sibling).execute(&db.admin).await.unwrap();
    }
    while store::keyword::pack(&db.app, org, i64::MAX).await.unwrap() > 0 {}
    let before = rows_holding(&db, &needles).await;
    for table in [
        "memory.content",
        "memory_posting_list.lexeme",
        "memory_term_stats.lexeme",
        "memory_entity.name",
        "memory_taxonomy_node.name",
        "memory_dedup_pair.reason",
    ] {
        assert!(before.iter().any(|(t, _)| t == table), "the scan finds {table} before: {before:?}");
    }

    // 1 memory, 2 merges, 3 profiles.
    assert_eq!(forget(&db.app, org, &ForgetSelector::Memories(vec![forgotten])).await.unwrap(), 6);

    assert_eq!(rows_holding(&db, &needles).await, Vec::<(String, i64)>::new());
    let digest: Option<String> =
        sqlx::query_scalar("SELECT digest FROM memory_ingest_batch WHERE organization_id = $1 AND batch_id = 'first'")
            .bind(org)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert_eq!(digest, None, "no digest of the forgotten text");
    let replay = ingestor.ingest(&first, Admission::Active).await.unwrap();
    assert!(replay.replayed && replay.created == 0, "a redelivery of its batch writes nothing: {replay:?}");
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory WHERE organization_id = $1 AND status <> 'forgotten'")
            .bind(org)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert_eq!(left, 3, "the sibling, the third memory and the archived project memory stay");
    for source in [sibling, later[0]] {
        let memory = reload(&db, org, source).await;
        assert_eq!(memory.status, MemoryStatus::Active, "a source of a forgotten merge is current again");
    }
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_job_outbox WHERE organization_id = $1 AND job_type = 'memory_entity_synthesis' \
           AND body->>'entity_id' = $2::text",
    )
    .bind(org)
    .bind(vault)
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert!(queued >= 1, "the entity that remains is synthesised again");
    let zero_stats: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT lexeme FROM memory_term_stats WHERE organization_id = $1 \
                               GROUP BY lexeme HAVING sum(doc_count) = 0) z",
    )
    .bind(org)
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(zero_stats, 0, "no statistics of a word no memory holds");
}

/// A memory that was merged and profiled, forgotten: its text is found nowhere afterwards, not by any mode or
/// strategy, not in its chain, its merge, the entity's profile, the events or any table; tombstones keep the ids.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_forgotten_memory_merged_and_profiled_is_found_nowhere(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::{
        retrieval::{RetrievalMode, RetrievalRequest, SearchRequest, SessionTurn, Strategy},
        store::SearchFilters,
    };
    const SECRET: &str = "PLUMBLINE-7731";
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let embedder = integration_tests::minilm();
    let message: IngestBatch = serde_json::from_value(serde_json::json!({"organization_id": org, "batch_id": "b",
        "memories": [
            {"content": format!("The zebra vault codeword is {SECRET}"), "memory_type": "semantic", "scope": "org",
             "entities": [{"name": "zebra-vault", "kind": "service"}],
             "provenance": {"source_kind": "human", "source_ref": "alice", "trust_level": "verified"}},
            {"content": "zebra-vault rotates its keys every month", "memory_type": "semantic", "scope": "org",
             "entities": [{"name": "zebra-vault", "kind": "service"}],
             "provenance": {"source_kind": "human", "source_ref": "bob", "trust_level": "verified"}},
            {"content": "billing-api deploys on Tuesdays", "memory_type": "semantic", "scope": "org",
             "provenance": {"source_kind": "human", "source_ref": "carol", "trust_level": "verified"}}]}))
    .unwrap();
    let ids =
        Ingestor::new(db.app.clone(), embedder.clone()).ingest(&message, Admission::Active).await.unwrap().memory_ids;
    let (secret, sibling) = (ids[0], ids[1]);

    // A merge of the two, superseding both.
    let text = format!("zebra-vault: codeword {SECRET}, keys rotate every month");
    let mut merged = NewMemory::new(org, MemoryType::Semantic, text.clone());
    merged.provenance.source_kind = SourceKind::Merge;
    merged.embedding = Some(embedder.embed_one(&text).await.unwrap());
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let merged = store::transitions::create(&mut tx, &merged, &[secret, sibling]).await.unwrap();
    for source in [secret, sibling] {
        store::transitions::supersede(&mut tx, org, source, merged.id, "dedup_merge").await.unwrap();
    }
    tx.commit().await.unwrap();
    // The entity's profile, written from the merge (a model that repeats what it is given).
    let parrot = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |request| {
        Ok(memory_core::llm::quoted_texts(&request.prompt).join(" "))
    }));
    let entity: Uuid = sqlx::query_scalar("SELECT id FROM memory_entity WHERE organization_id = $1")
        .bind(org)
        .fetch_one(&db.admin)
        .await
        .unwrap();
    EntitySynthesizer::new(parrot, Some(embedder.clone())).synthesize_profile(&db.app, org, entity).await.unwrap();
    let leaks = async |sql: &str| -> i64 { sqlx::query_scalar(sql).bind(org).fetch_one(&db.admin).await.unwrap() };
    let in_memories = "SELECT count(*) FROM memory WHERE organization_id = $1 AND content || coalesce(context, '') LIKE '%PLUMBLINE%'";
    assert_eq!(leaks(in_memories).await, 3, "the memory, its merge and the profile say it before");

    assert_eq!(forget(&db.app, org, &ForgetSelector::Memories(vec![secret])).await.unwrap(), 3);
    assert_eq!(forget(&db.app, org, &ForgetSelector::Memories(vec![secret])).await.unwrap(), 0, "once");

    let retriever = integration_tests::shipped_retriever(&db, embedder);
    let query = format!("zebra vault codeword {SECRET}");
    let said = |content: &str| content.contains("PLUMBLINE");
    for (mode, archive) in [
        (RetrievalMode::Passive, false),
        (RetrievalMode::Mention, false),
        (RetrievalMode::AgentQuery, false),
        (RetrievalMode::AgentQuery, true),
    ] {
        let text = if mode == RetrievalMode::Mention { format!("@memory:{query}") } else { query.clone() };
        let mut ask = RetrievalRequest::new(org, mode, text);
        ask.include_archive = archive;
        if mode == RetrievalMode::Passive {
            ask.session = Some(SessionTurn { session_id: "s".into(), turn: 1 });
        }
        let answer = retriever.query(ask).await.unwrap();
        assert!(!answer.memories.iter().any(|m| said(&m.memory.content)), "{mode:?}");
        assert!(!answer.entity_profiles.iter().any(|p| said(&p.profile.content)), "{mode:?}");
    }
    for strategy in [Strategy::Vector, Strategy::Keyword, Strategy::Hybrid, Strategy::Graph, Strategy::Metadata] {
        let search = SearchRequest {
            filters: SearchFilters { include_archive: true, ..SearchFilters::default() },
            include_graph: true,
            ..SearchRequest::new(org, strategy, query.clone())
        };
        let hits = retriever.search(search).await.unwrap().hits;
        assert!(!hits.iter().any(|h| said(&h.memory.content)), "{strategy:?}");
    }
    let chain = retriever.supersession_chain(org, None, secret).await.unwrap();
    assert!(chain.iter().any(|m| m.id == secret && m.status == MemoryStatus::Forgotten && m.content.is_empty()));
    assert!(!chain.iter().any(|m| said(&m.content)));
    assert_eq!(reload(&db, org, sibling).await.status, MemoryStatus::Active, "its sibling is current again");

    assert_eq!(leaks(in_memories).await, 0);
    assert_eq!(
        leaks("SELECT count(*) FROM memory_posting WHERE organization_id = $1 AND lexeme LIKE 'plumblin%'").await,
        0
    );
    let counted = "SELECT coalesce(sum(doc_count), 0)::bigint FROM memory_term_stats WHERE organization_id = $1 AND lexeme LIKE 'plumblin%'";
    assert_eq!(leaks(counted).await, 0);
    assert_eq!(
        leaks(
            "SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND payload::text LIKE '%PLUMBLINE%'"
        )
        .await,
        0
    );
    assert_eq!(
        leaks(
            "SELECT count(*) FROM memory WHERE organization_id = $1 AND status = 'forgotten' AND embedding IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(leaks("SELECT count(*) FROM memory_entity_profile WHERE organization_id = $1").await, 0);
    assert_eq!(
        leaks(
            "SELECT count(*) FROM domain_event_outbox WHERE organization_id = $1 AND event_type = 'memory.forgotten'"
        )
        .await,
        3
    );
}
