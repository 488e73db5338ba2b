//! Strategy search: filters inside the SQL, fusion, graph expansion, metadata lookups.

use std::sync::Arc;

use integration_tests::{Db, FixedEmbedder, axis, lock_waiters, memory, retriever, vector_with_similarity};
use memory_core::{
    domain::{MemoryType, Scope},
    ingest::{Admission, IngestBatch, Ingestor},
    lifecycle::{forget::ForgetSelector, sweep},
    retrieval::{
        MatchKind, SearchRequest, Strategy,
        fusion::Fusion,
        keyword::{self, Bm25},
        stage1,
    },
    store::{
        self, ReadFilter, SearchFilters,
        branches::{BranchExtras, BranchRow, VectorScan},
        keyword::KeywordSearch,
    },
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn search(org: Uuid, query: &str, strategy: Strategy) -> SearchRequest {
    SearchRequest { max_results: 10, ..SearchRequest::new(org, strategy, query) }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn hybrid_ranks_an_exact_identifier_first_where_vector_search_misses_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..15 {
        memory(org, &format!("general note {i}")).embedding(vector_with_similarity(0.9, 30 + i)).insert(&db).await;
    }
    let code = memory(org, "E4021 means the refresh token expired").embedding(axis(100)).insert(&db).await;
    let query = "E4021";
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);

    let mut vector = search(org, query, Strategy::Vector);
    vector.max_results = 5;
    let hits = r.search(vector).await.unwrap().hits;
    assert!(hits.iter().all(|h| h.memory.id != code.id && h.match_kind == MatchKind::Vector));

    let hybrid = r.search(search(org, query, Strategy::Hybrid)).await.unwrap().hits;
    assert_eq!(hybrid[0].memory.id, code.id);
    assert_eq!(hybrid[0].match_kind, MatchKind::Hybrid);

    let keyword = r.search(search(org, query, Strategy::Keyword)).await.unwrap().hits;
    assert_eq!(keyword.len(), 1);
    assert_eq!(keyword[0].match_kind, MatchKind::Keyword);

    let mut weighted = search(org, query, Strategy::Hybrid);
    weighted.fusion = Fusion::Weighted;
    weighted.vector_weight = 0.2;
    assert_eq!(r.search(weighted).await.unwrap().hits[0].memory.id, code.id);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn metadata_filters_apply_inside_each_branch(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // Twenty near matches without the tag; the one tagged memory is far from the query.
    for i in 0..20 {
        memory(org, &format!("close match {i}")).embedding(vector_with_similarity(0.95, 30 + i)).insert(&db).await;
    }
    let mut tagged =
        memory(org, "far but tagged").embedding(axis(200)).confidence(0.9).memory_type(MemoryType::Procedural);
    tagged.new.tags = vec!["billing".into(), "urgent".into()];
    tagged.new.labels = serde_json::json!({"team": "payments"});
    let tagged = tagged.insert(&db).await;

    let query = "anything";
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);
    let mut req = search(org, query, Strategy::Vector);
    req.max_results = 1;
    req.filters = SearchFilters {
        tags_all: vec!["billing".into(), "urgent".into()],
        memory_types: vec![MemoryType::Procedural],
        min_confidence: Some(0.85),
        labels: [("team".to_string(), "payments".to_string())].into(),
        ..SearchFilters::default()
    };
    let hits = r.search(req.clone()).await.unwrap().hits;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].memory.id, tagged.id);

    req.filters.tags_any = vec!["nope".into()];
    assert!(r.search(req).await.unwrap().hits.is_empty());
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn metadata_strategy_lists_filtered_memories_newest_first(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let now = chrono::Utc::now();
    let older = memory(org, "older")
        .memory_type(MemoryType::Preference)
        .created_at(now - chrono::Duration::days(2))
        .insert(&db)
        .await;
    let newer = memory(org, "newer")
        .memory_type(MemoryType::Preference)
        .created_at(now - chrono::Duration::days(1))
        .insert(&db)
        .await;
    memory(org, "other type").insert(&db).await;
    let r = retriever(&db, Arc::new(FixedEmbedder::default()), None);
    let mut req = search(org, "", Strategy::Metadata);
    req.filters.memory_types = vec![MemoryType::Preference];
    let hits = r.search(req).await.unwrap().hits;
    let ids: Vec<Uuid> = hits.iter().map(|h| h.memory.id).collect();
    assert_eq!(ids, vec![newer.id, older.id]);
    assert!(hits.iter().all(|h| h.match_kind == MatchKind::Metadata));
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn graph_expansion_adds_memories_sharing_an_entity_with_hop_decay(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let direct =
        memory(org, "billing-api returns E5003 on bad webhook signatures").embedding(axis(0)).insert(&db).await;
    let neighbour = memory(org, "the payments team owns that service").embedding(axis(1)).insert(&db).await;
    let two_hops = memory(org, "the payments team sits in Berlin").embedding(axis(2)).insert(&db).await;
    memory(org, "unrelated lunch menu").embedding(axis(3)).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let service = store::entities::upsert(&mut *tx, org, "service", "billing-api").await.unwrap();
    let team = store::entities::upsert(&mut *tx, org, "team", "payments").await.unwrap();
    store::entities::add_mention(&mut *tx, org, service, direct.id).await.unwrap();
    store::entities::add_mention(&mut *tx, org, service, neighbour.id).await.unwrap();
    store::entities::add_mention(&mut *tx, org, team, neighbour.id).await.unwrap();
    store::entities::add_mention(&mut *tx, org, team, two_hops.id).await.unwrap();
    tx.commit().await.unwrap();

    let query = "E5003";
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);
    let mut req = search(org, query, Strategy::Keyword);
    req.include_graph = true;
    let hits = r.search(req).await.unwrap().hits;
    let kinds: Vec<(Uuid, MatchKind, Option<u32>)> = hits.iter().map(|h| (h.memory.id, h.match_kind, h.hops)).collect();
    assert_eq!(
        kinds,
        vec![
            (direct.id, MatchKind::Keyword, None),
            (neighbour.id, MatchKind::Graph, Some(1)),
            (two_hops.id, MatchKind::Graph, Some(2)),
        ]
    );
    assert!((hits[1].score - hits[0].score * 0.5).abs() < 1e-12);
    assert!((hits[2].score - hits[0].score * 0.25).abs() < 1e-12);
}

/// Graph expansion follows the newest neighbours when there are more than it returns.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn graph_expansion_returns_the_newest_neighbours(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let direct = memory(org, "billing-api returns E5003").embedding(axis(0)).insert(&db).await;
    let mut neighbours = Vec::new();
    for day in 1..=10 {
        let at = chrono::Utc::now() - chrono::Duration::days(20 - day);
        let m = memory(org, &format!("billing-api note {day}")).embedding(axis(1)).created_at(at).insert(&db).await;
        neighbours.push(m.id);
    }
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let service = store::entities::upsert(&mut *tx, org, "service", "billing-api").await.unwrap();
    for id in std::iter::once(direct.id).chain(neighbours.iter().copied()) {
        store::entities::add_mention(&mut *tx, org, service, id).await.unwrap();
    }
    tx.commit().await.unwrap();

    let query = "E5003";
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);
    let mut req = search(org, query, Strategy::Keyword);
    req.include_graph = true;
    req.max_results = 3;
    let hits = r.search(req).await.unwrap().hits;
    let graph: Vec<Uuid> = hits.iter().filter(|h| h.match_kind == MatchKind::Graph).map(|h| h.memory.id).collect();
    assert_eq!(graph.len(), 2);
    assert!(graph.iter().all(|id| neighbours[7..].contains(id)), "the newest three were followed: {graph:?}");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keyword_ranking_prefers_rare_terms_and_statistics_follow_writes(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // "deploy" is everywhere, "kestrel" in one memory: BM25 ranks the rare term's match first.
    for i in 0..10 {
        memory(org, &format!("deploy note {i} about the deploy pipeline")).embedding(axis(1)).insert(&db).await;
    }
    let rare = memory(org, "kestrel cluster handles the deploy").embedding(axis(1)).insert(&db).await;
    let query = "deploy kestrel";
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);
    let mut req = search(org, query, Strategy::Keyword);
    req.max_results = 20;
    let hits = r.search(req).await.unwrap().hits;
    assert_eq!(hits.len(), 11);
    assert_eq!(hits[0].memory.id, rare.id);
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));

    let (docs, deploy): (i64, i64) = sqlx::query_as(
        "SELECT c.doc_count, (SELECT sum(doc_count)::bigint FROM memory_term_stats t \
                              WHERE t.organization_id = c.organization_id AND t.lexeme = 'deploy') \
         FROM memory_corpus_totals c WHERE c.organization_id = $1",
    )
    .bind(org)
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!((docs, deploy), (11, 11));
    sqlx::query("DELETE FROM memory WHERE organization_id = $1 AND id = $2")
        .bind(org)
        .bind(rare.id)
        .execute(&db.admin)
        .await
        .unwrap();
    let kestrel: i64 = sqlx::query_scalar(
        "SELECT sum(doc_count)::bigint FROM memory_term_stats WHERE organization_id = $1 AND lexeme = 'kestrel'",
    )
    .bind(org)
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(kestrel, 0);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keyword_search_honours_phrases_and_exclusions(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let phrase = memory(org, "blue green deploy of the billing service").insert(&db).await;
    memory(org, "green blue deploy of the billing service").insert(&db).await;
    let rollback = memory(org, "rollback plan for the billing service").insert(&db).await;
    memory(org, "canary rollback for the billing service").insert(&db).await;
    let query = r#""blue green" rollback -canary"#;
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with(query, axis(0))), None);
    let hits = r.search(search(org, query, Strategy::Keyword)).await.unwrap().hits;
    let mut found: Vec<Uuid> = hits.iter().map(|h| h.memory.id).collect();
    found.sort();
    let mut expected = vec![phrase.id, rollback.id];
    expected.sort();
    assert_eq!(found, expected);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keyword_postings_follow_text_edits_but_not_status_changes(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "the kestrel cluster runs nightly").insert(&db).await;
    let postings = |lexeme: &'static str| {
        let admin = db.admin.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM memory_posting WHERE organization_id = $1 AND memory_id = $2 AND lexeme = $3",
            )
            .bind(org)
            .bind(m.id)
            .bind(lexeme)
            .fetch_one(&admin)
            .await
            .unwrap()
        }
    };
    assert_eq!((postings("kestrel").await, postings("osprey").await), (1, 0));
    let total = "SELECT count(*) FROM memory_posting WHERE organization_id = $1";
    let before: i64 = sqlx::query_scalar(total).bind(org).fetch_one(&db.admin).await.unwrap();

    sqlx::query("UPDATE memory SET confidence = 0.3 WHERE id = $1").bind(m.id).execute(&db.admin).await.unwrap();
    let after: i64 = sqlx::query_scalar(total).bind(org).fetch_one(&db.admin).await.unwrap();
    assert_eq!(after, before);

    sqlx::query("UPDATE memory SET content = 'the osprey cluster runs nightly' WHERE id = $1")
        .bind(m.id)
        .execute(&db.admin)
        .await
        .unwrap();
    assert_eq!((postings("kestrel").await, postings("osprey").await), (0, 1));
    let r = retriever(&db, Arc::new(FixedEmbedder::default()), None);
    let hits = r.search(search(org, "osprey", Strategy::Keyword)).await.unwrap().hits;
    assert_eq!(hits.len(), 1);
    assert!(r.search(search(org, "kestrel", Strategy::Keyword)).await.unwrap().hits.is_empty());

    sqlx::query("DELETE FROM memory WHERE id = $1").bind(m.id).execute(&db.admin).await.unwrap();
    let left: i64 = sqlx::query_scalar(total).bind(org).fetch_one(&db.admin).await.unwrap();
    assert_eq!(left, 0);
}

/// The keyword branch's rows for "zephyr" (at most 5) under `scope`, scored with `bm25`.
async fn zephyr_rows(db: &Db, scope: &ReadFilter, bm25: Bm25) -> Vec<BranchRow> {
    let search = KeywordSearch {
        text_search_config: "memory_text",
        text: "zephyr",
        query: None,
        rows: 5,
        extras: BranchExtras::NONE,
        posting_budget: store::keyword::POSTING_BUDGET,
    };
    let mut tx = store::begin_keyword_search(&db.app, scope.organization_id(), 5_000).await.unwrap();
    let rows = keyword::keyword_branch(&mut tx, scope, &SearchFilters::default(), &search, bm25).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

/// A query's terms are read rarest first while their postings stay within the budget (the rarest always): a
/// commoner term beyond it is not scored, by the branch and the reference alike, and within it the query is scored
/// on every term.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_keyword_branch_reads_a_query_s_terms_within_its_posting_budget(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let rare: Vec<Uuid> = [
        memory(org, "the kestrel nests on the tower").insert(&db).await.id,
        memory(org, "a kestrel hovered over the field").insert(&db).await.id,
    ]
    .into();
    for i in 0..20 {
        memory(org, &format!("the harbor crane {i} was serviced")).insert(&db).await;
    }
    let scope = ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false);
    let bm25 = Bm25::default();
    let found = |posting_budget: usize, exact: bool| {
        let (db, scope) = (&db, &scope);
        async move {
            let search = KeywordSearch {
                text_search_config: "memory_text",
                text: "kestrel harbor",
                query: None,
                rows: 100,
                extras: BranchExtras::NONE,
                posting_budget,
            };
            let mut tx = store::begin_keyword_search(&db.app, org, 5_000).await.unwrap();
            let filters = SearchFilters::default();
            let rows = if exact {
                store::keyword::keyword_branch_exact(&mut tx, scope, &filters, &search, (bm25.k1, bm25.b))
                    .await
                    .unwrap()
            } else {
                keyword::keyword_branch(&mut tx, scope, &filters, &search, bm25).await.unwrap()
            };
            tx.commit().await.unwrap();
            let mut ids: Vec<Uuid> = rows.into_iter().map(|r| r.memory.id).collect();
            ids.sort();
            ids
        }
    };
    let mut kestrel = rare.clone();
    kestrel.sort();
    for exact in [false, true] {
        assert_eq!(found(store::keyword::POSTING_BUDGET, exact).await.len(), 22, "every term within the default");
        assert_eq!(found(21, exact).await, kestrel, "harbor's 20 postings would take the query to 22");
        assert_eq!(found(0, exact).await, kestrel, "the rarest term is read whatever the budget");
        assert_eq!(found(22, exact).await.len(), 22);
    }
}

/// The keyword branch joins its ranking to the memories in rounds, the first of `4 × limit`; when the scope filter
/// leaves fewer than `limit` in it, a later round must find the readable memories ranked below that cut.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keyword_branch_finds_readable_matches_ranked_below_unreadable_ones(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let other_agent = Uuid::now_v7();
    // Shorter memories score higher: 15 unreadable ones, then `near`, then 10 more unreadable, then `far`.
    for _ in 0..15 {
        memory(org, "zephyr").scope(Scope::AgentPrivate).agent(other_agent).insert(&db).await;
    }
    let near = memory(org, "zephyr alpha").insert(&db).await;
    for _ in 0..10 {
        memory(org, "zephyr beta gamma").scope(Scope::AgentPrivate).agent(other_agent).insert(&db).await;
    }
    let far = memory(org, "zephyr delta epsilon theta iota").insert(&db).await;

    let scope =
        ReadFilter::for_retrieval(org, vec![Scope::Org, Scope::AgentPrivate], Some(Uuid::now_v7()), None, None, false);
    let rows = zephyr_rows(&db, &scope, Bm25::default()).await;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.memory.id).collect();
    assert_eq!(ids, vec![near.id, far.id]);
}

/// The keyword branch scores with the configured BM25 parameters: with b = 0 a memory's length does not count, with
/// b = 1 the shorter of two single matches scores higher.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keyword_scores_follow_the_configured_bm25_parameters(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let short = memory(org, "zephyr alpha").insert(&db).await;
    let long = memory(org, "zephyr beta gamma delta epsilon theta").insert(&db).await;
    let scope = ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false);
    let scores = async |b: f64| {
        let rows = zephyr_rows(&db, &scope, Bm25 { k1: 1.2, b }).await;
        let score = |id: Uuid| rows.iter().find(|r| r.memory.id == id).unwrap().keyword_score.unwrap();
        (score(short.id), score(long.id))
    };
    let (short_flat, long_flat) = scores(0.0).await;
    assert!((short_flat - long_flat).abs() < 1e-12, "{short_flat} vs {long_flat}");
    let (short_normalised, long_normalised) = scores(1.0).await;
    assert!(short_normalised > long_normalised, "{short_normalised} vs {long_normalised}");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn large_tenants_get_their_own_ann_index_and_lose_it_when_they_shrink(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let (large, small) = (Uuid::now_v7(), Uuid::now_v7());
    for i in 0..12 {
        memory(large, &format!("large tenant note {i}"))
            .embedding(vector_with_similarity(0.9, 20 + i))
            .insert(&db)
            .await;
    }
    for i in 0..3 {
        memory(small, &format!("small tenant note {i}")).embedding(axis(i)).insert(&db).await;
    }
    let changes = store::ann::reconcile(&db.admin, 10).await.unwrap();
    assert_eq!((changes.created, changes.dropped, changes.kept), (vec![large], vec![], 0));
    assert_eq!(store::ann::indexed_tenants(&db.admin).await.unwrap(), vec![large]);
    let definition: String = sqlx::query_scalar("SELECT indexdef FROM pg_indexes WHERE indexname = $1")
        .bind(store::ann::index_name(large))
        .fetch_one(&db.admin)
        .await
        .unwrap();
    assert!(
        definition.contains("hnsw") && definition.contains(&format!("ON public.{}", store::ann::partition_name(large))),
        "{definition}"
    );
    // Analysed by the move, not left to autovacuum.
    let analysed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_statistic WHERE starelid = to_regclass($1))")
            .bind(store::ann::partition_name(large))
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert!(analysed);

    // The vector branch's own statement: the large tenant's runs its partition's index (the planner pruned every
    // other partition), the small tenant's scans its rows exactly and touches no partition.
    let plan = async |org: Uuid, settings: &[&str]| explain_vector(&db, org, VectorScan::Either, 5, settings).await;
    // The retrieval context tells the pipeline which tenant has its partition ready (the other is scanned exactly,
    // one statement arm).
    let partition = async |org| store::agents::retrieval_context(&db.app, org, None).await.unwrap().vector_partition;
    assert!(partition(large).await && !partition(small).await);

    // Ingest's near-duplicate probe reads the same way.
    let first: memory_core::domain::Memory =
        sqlx::query_as("SELECT * FROM memory WHERE organization_id = $1 AND content = 'large tenant note 0'")
            .bind(large)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    let mut tx = store::begin_for_org(&db.app, large).await.unwrap();
    let readership = memory_core::domain::Readership::of(&first);
    let partitioned = store::ann::partition_ready(&mut tx, large).await.unwrap();
    assert!(partitioned);
    let near = store::ingest::near_duplicates(
        &mut tx,
        large,
        Uuid::nil(),
        &readership,
        &vector_with_similarity(0.9, 20),
        0.99,
        5,
        partitioned,
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(near.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![first.id]);

    // With the scans that compete with an index scan at a dozen rows ruled out.
    let index_scans = ["enable_seqscan = off", "enable_bitmapscan = off", "enable_sort = off"];
    let large_plan = read_relations(&plan(large, &index_scans).await);
    assert!(large_plan.contains(&store::ann::index_name(large)), "{large_plan:?}");
    // No parallel workers where they cost nothing, as a large tenant's rows make them worth it to the planner: the
    // exact arm, gated off for this tenant, would start them all the same.
    let free_workers = [
        "parallel_setup_cost = 0",
        "parallel_tuple_cost = 0",
        "min_parallel_table_scan_size = 0",
        "min_parallel_index_scan_size = 0",
    ];
    let parallel = plan(large, &free_workers).await;
    assert!(!parallel.to_string().contains("Gather"), "{parallel}");
    let partitions = |plan: &[String]| {
        plan.iter()
            .filter(|r| r.starts_with("memory_vector_") && !r.starts_with("memory_vector_tenant"))
            .cloned()
            .collect::<Vec<_>>()
    };
    let own = [store::ann::partition_name(large), store::ann::index_name(large)];
    assert!(partitions(&large_plan).iter().all(|r| own.contains(r)), "{large_plan:?}");
    let small_plan = read_relations(&plan(small, &index_scans).await);
    assert_eq!(partitions(&small_plan), Vec::<String>::new(), "{small_plan:?}");
    // The pipeline's scan of a tenant without a partition: one arm, through an index on the organisation even where
    // the statistics make a sequential scan cheaper (one page).
    sqlx::query("ANALYZE memory").execute(&db.admin).await.unwrap();
    let exact = explain_vector(&db, small, VectorScan::Exact, 5, &[]).await;
    let read = read_relations(&exact);
    assert!(read.iter().all(|r| !r.starts_with("memory_vector")), "{read:?}");
    assert!(!exact.to_string().contains("Seq Scan"), "{exact}");

    assert_eq!(store::ann::reconcile(&db.admin, 10).await.unwrap().kept, 1);
    sqlx::query("DELETE FROM memory WHERE organization_id = $1 AND content <> 'large tenant note 0'")
        .bind(large)
        .execute(&db.admin)
        .await
        .unwrap();
    let changes = store::ann::reconcile(&db.admin, 10).await.unwrap();
    assert_eq!(changes.dropped, vec![large]);
    assert!(store::ann::indexed_tenants(&db.admin).await.unwrap().is_empty());
    let partition: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(store::ann::partition_name(large))
        .fetch_one(&db.admin)
        .await
        .unwrap();
    assert_eq!(partition, None);
}

/// A tenant with its own partition is searched through its HNSW index as planned from real statistics, whatever its
/// size: where the tenant is a small part of `memory`, the planner took the join of its partition to `memory` for
/// a handful of rows (it estimates the join from the whole table's ids) and scanned the tenant exactly.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_tenant_small_beside_the_others_is_still_searched_through_its_partitions_index(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let (tenant, others) = (Uuid::now_v7(), Uuid::now_v7());
    let template = memory(tenant, "tenant note").embedding(vector_with_similarity(0.9, 20)).insert(&db).await;
    // The tenant's 400 memories beside 20,000 of another organisation, copies of one row.
    let columns: String = sqlx::query_scalar(
        "SELECT string_agg(quote_ident(column_name), ', ') FROM information_schema.columns \
         WHERE table_name = 'memory' AND is_generated = 'NEVER' AND column_name NOT IN ('id', 'organization_id')",
    )
    .fetch_one(&db.admin)
    .await
    .unwrap();
    let copy = format!(
        "INSERT INTO memory (id, organization_id, {columns}) SELECT gen_random_uuid(), $2, {columns} \
         FROM memory CROSS JOIN generate_series(1, $3) WHERE id = $1"
    );
    for (org, count) in [(tenant, 399), (others, 20_000)] {
        sqlx::query(&copy).bind(template.id).bind(org).bind(count).execute(&db.admin).await.unwrap();
    }
    store::ann::Mover::lock(&db.admin).await.unwrap().move_in(tenant).await.unwrap();
    sqlx::query("ANALYZE").execute(&db.admin).await.unwrap();

    let plan = explain_vector(&db, tenant, VectorScan::Either, 50, &[]).await;
    // Every read of the partition goes through its HNSW index.
    let partition_name = serde_json::json!(store::ann::partition_name(tenant));
    let partition_reads = |plan: &serde_json::Value| -> Vec<_> {
        plan_nodes(plan)
            .into_iter()
            .filter(|node| node.get("Relation Name") == Some(&partition_name))
            .map(|node| (node["Node Type"].clone(), node.get("Index Name").cloned()))
            .collect()
    };
    let through_index = (serde_json::json!("Index Scan"), Some(serde_json::json!(store::ann::index_name(tenant))));
    assert_eq!(partition_reads(&plan), vec![through_index.clone()], "{plan}");

    // Ingest's near-duplicate probe, inside an ingest's transaction, reads it the same way (on the planner's defaults
    // it read the partition whole, sorted), and gives the transaction back its settings as they were.
    let mut tx = store::begin_for_org(&db.app, tenant).await.unwrap();
    // pgvector loaded (as an ingest has by its probe, having written embeddings), one of its settings changed.
    sqlx::query("SELECT '[1]'::vector").execute(&mut *tx).await.unwrap();
    sqlx::query("SET LOCAL hnsw.ef_search = 77").execute(&mut *tx).await.unwrap();
    let before = vector_settings(&mut tx).await;
    let partition = store::ann::partition_ready(&mut tx, tenant).await.unwrap();
    assert!(partition);
    let readership = memory_core::domain::Readership::of(&template);
    let near = vector_with_similarity(0.9, 20);
    let probe = store::ingest::explain_near_duplicates(&mut tx, tenant, Uuid::nil(), &readership, &near, 5, partition)
        .await
        .unwrap();
    assert_eq!(partition_reads(&probe), vec![through_index], "{probe}");
    assert_eq!((vector_settings(&mut tx).await, before[1].as_str()), (before.clone(), "77"));
    tx.rollback().await.unwrap();

    // Under metadata filters the planner chooses: a selective filter makes the exact scan right.
    let sort = async |filters: &SearchFilters| -> String {
        let mut tx = store::begin_vector_search(&db.app, tenant, 50, 5_000, VectorScan::Either, filters).await.unwrap();
        sqlx::query_scalar("SELECT current_setting('enable_sort')").fetch_one(&mut *tx).await.unwrap()
    };
    let procedural = SearchFilters { memory_types: vec![MemoryType::Procedural], ..SearchFilters::default() };
    assert_eq!((sort(&SearchFilters::default()).await, sort(&procedural).await), ("off".into(), "on".into()));
}

/// The pipeline reads a tenant whose partition was ready at the start of its request through that partition alone
/// (planning the exact arm beside it had doubled the planner's time), and exactly once the partition is gone.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_partitioned_tenant_is_read_through_its_partition_alone_and_exactly_once_it_moved_out(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let tenant = Uuid::now_v7();
    for i in 0..30 {
        memory(tenant, &format!("note {i}"))
            .embedding(vector_with_similarity(0.5 + 0.01 * i as f32, i))
            .insert(&db)
            .await;
    }
    let mut mover = store::ann::Mover::lock(&db.admin).await.unwrap();
    mover.move_in(tenant).await.unwrap();
    let retriever = retriever(&db, Arc::new(FixedEmbedder::default()), None);
    let settings = retriever.tenant_branch_settings(5, 30, true, BranchExtras::NONE);

    // `memory` is read once: by key, for the rows the partition's index finds.
    let plan = explain_vector(&db, tenant, settings.vector_scan, 5, &[]).await;
    let memory_reads: Vec<_> = plan_nodes(&plan)
        .into_iter()
        .filter(|node| node.get("Relation Name").is_some_and(|name| name == "memory"))
        .map(|node| node.get("Index Name").cloned())
        .collect();
    assert_eq!(memory_reads, vec![Some(serde_json::json!("memory_pkey"))], "{plan}");

    let (scope, filters) =
        (ReadFilter::for_retrieval(tenant, vec![Scope::Org], None, None, None, false), SearchFilters::default());
    let query = pgvector::Vector::from(axis(0));
    let branch = async |settings: &stage1::BranchSettings<'_>| {
        let found = stage1::vector_branch(&db.app, &scope, &filters, &query, settings).await.unwrap();
        found.into_iter().map(|row| row.memory.id).collect::<Vec<_>>()
    };
    let exact = branch(&retriever.tenant_branch_settings(5, 30, false, BranchExtras::NONE)).await;
    assert_eq!(exact.len(), 30);
    assert_eq!(branch(&settings).await, exact);

    // The tenant moves out after its request found the partition ready: the statement finds nothing, and the branch
    // reads the tenant exactly.
    mover.move_out(tenant).await.unwrap();
    let mut tx = store::begin_vector_search(&db.app, tenant, 5, 5_000, settings.vector_scan, &filters).await.unwrap();
    let found =
        store::branches::vector_branch(&mut tx, &scope, &filters, &query, 5, BranchExtras::NONE, settings.vector_scan)
            .await
            .unwrap();
    assert!(found.is_empty());
    tx.rollback().await.unwrap();
    assert_eq!(branch(&settings).await, exact);
}

/// The exact scan sorts the tenant's memories as ids and distances and reads the columns of the rows it returns
/// only (a wide row formed for each memory is about half the statement at 1,500 memories).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_exact_vector_scan_sorts_ids_and_distances_only(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    for i in 0..30 {
        memory(org, &format!("note {i}")).embedding(vector_with_similarity(0.5 + 0.01 * i as f32, i)).insert(&db).await;
    }
    let plan = explain_vector(&db, org, VectorScan::Exact, 5, &[]).await;
    let sort_widths: Vec<i64> = plan_nodes(&plan)
        .into_iter()
        .filter(|node| node["Node Type"] == "Sort")
        .map(|node| node["Plan Width"].as_i64().unwrap())
        .collect();
    // One sort, of uuids and float8s (24 bytes), and the memories' columns read for the 5 it keeps.
    assert_eq!(sort_widths, vec![24], "{plan}");
    assert_eq!(memory_rows_read(&plan), 30.0 + 5.0, "{plan}");
}

/// The keyword branch reads `memory` in its ranking's order and stops at the rows it returns, row by row and from a
/// ranking scored in process alike: a match ranked below them costs nothing.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_keyword_branch_reads_memories_only_as_far_down_its_ranking_as_it_returns(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut ids = Vec::new();
    for i in 0..60 {
        // The longer, the lower the score: each memory has a score of its own.
        ids.push(memory(org, &format!("zephyr {}", "filler ".repeat(i))).insert(&db).await.id);
    }
    let scope = ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false);
    let filters = SearchFilters::default();
    let search = KeywordSearch {
        text_search_config: "memory_text",
        text: "zephyr",
        query: None,
        rows: 10,
        extras: BranchExtras::NONE,
        posting_budget: store::keyword::POSTING_BUDGET,
    };
    let bm25 = Bm25::default();
    let mut tx = store::begin_keyword_search(&db.app, org, 5_000).await.unwrap();
    let row_wise = store::keyword::explain_keyword_branch_exact(&mut tx, &scope, &filters, &search, (bm25.k1, bm25.b))
        .await
        .unwrap();
    let ranked: Vec<(Uuid, f64)> = ids.iter().enumerate().map(|(i, id)| (*id, 100.0 - i as f64)).collect();
    let packed = store::keyword::explain_readable(&mut tx, &scope, &filters, &search, &ranked, 10).await.unwrap();
    tx.rollback().await.unwrap();
    for plan in [row_wise, packed] {
        assert_eq!(memory_rows_read(&plan), 10.0, "{plan}");
    }
}

/// The rows an `EXPLAIN (ANALYZE, FORMAT JSON)` plan read from `memory`, over all its loops.
fn memory_rows_read(plan: &serde_json::Value) -> f64 {
    plan_nodes(plan)
        .into_iter()
        .filter(|node| node.get("Relation Name").is_some_and(|name| name == "memory"))
        .map(|node| node["Actual Rows"].as_f64().unwrap() * node["Actual Loops"].as_f64().unwrap())
        .sum()
}

/// The vector branch's plan for an organisation-wide reader of `org`, its `rows` nearest `axis(0)`, in a transaction
/// begun as the branch begins it, with `settings` (`SET LOCAL`) on top.
async fn explain_vector(db: &Db, org: Uuid, scan: VectorScan, rows: usize, settings: &[&str]) -> serde_json::Value {
    let scope = ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false);
    let filters = SearchFilters::default();
    let mut tx = store::begin_vector_search(&db.app, org, rows, 5_000, scan, &filters).await.unwrap();
    for set in settings {
        sqlx::query(&format!("SET LOCAL {set}")).execute(&mut *tx).await.unwrap();
    }
    let query = pgvector::Vector::from(axis(0));
    let plan = store::branches::explain_vector_branch(&mut tx, &scope, &filters, &query, rows, scan).await.unwrap();
    tx.rollback().await.unwrap();
    plan
}

/// The settings a vector search sets, as the connection has them now.
async fn vector_settings(conn: &mut sqlx::PgConnection) -> Vec<String> {
    let names = [
        "hnsw.iterative_scan",
        "hnsw.ef_search",
        "plan_cache_mode",
        "enable_seqscan",
        "enable_sort",
        "max_parallel_workers_per_gather",
    ];
    let mut values = Vec::new();
    for name in names {
        values.push(sqlx::query_scalar("SELECT current_setting($1)").bind(name).fetch_one(&mut *conn).await.unwrap());
    }
    values
}

/// The relations and indexes an `EXPLAIN (FORMAT JSON)` plan reads.
fn read_relations(plan: &serde_json::Value) -> Vec<String> {
    plan_nodes(plan)
        .into_iter()
        .flat_map(|node| [node.get("Relation Name"), node.get("Index Name")])
        .filter_map(|name| name?.as_str().map(String::from))
        .collect()
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, subplans and init plans included.
fn plan_nodes(plan: &serde_json::Value) -> Vec<&serde_json::Map<String, serde_json::Value>> {
    let (mut nodes, mut stack) = (Vec::new(), vec![plan]);
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(fields) => {
                if fields.contains_key("Node Type") {
                    nodes.push(fields);
                }
                stack.extend(fields.values());
            }
            _ => {}
        }
    }
    nodes
}

/// A tenant moves into its partition and out again while its agents read and write: every read finds the nearest
/// memory, and after each move in the partition holds exactly the tenant's embeddings, those written during the
/// fill included; a forget takes the embedding out of it too.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_tenant_moves_into_its_partition_and_out_online_while_it_reads_and_writes(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let mut notes = Vec::new();
    for i in 0..400 {
        notes.push(
            memory(org, &format!("note {i}")).embedding(vector_with_similarity(0.5, 1 + i % 300)).insert(&db).await.id,
        );
    }
    let nearest = memory(org, "the nearest note").embedding(axis(0)).insert(&db).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let relaxed = std::sync::atomic::Ordering::Relaxed;

    let reader = tokio::spawn({
        let (app, stop) = (db.app.clone(), stop.clone());
        async move {
            let (scope, query) = (
                ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false),
                pgvector::Vector::from(axis(0)),
            );
            let mut reads = 0usize;
            while !stop.load(relaxed) {
                let mut tx =
                    store::begin_vector_search(&app, org, 10, 5_000, VectorScan::Either, &SearchFilters::default())
                        .await
                        .unwrap();
                let found = store::branches::vector_branch(
                    &mut tx,
                    &scope,
                    &SearchFilters::default(),
                    &query,
                    3,
                    BranchExtras::NONE,
                    VectorScan::Either,
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
                assert_eq!(found.first().map(|r| r.memory.id), Some(nearest.id), "read {reads}");
                reads += 1;
            }
            reads
        }
    });
    let writer = tokio::spawn({
        let (app, stop) = (db.app.clone(), stop.clone());
        async move {
            // New memories, and every other time one of the first ones forgotten (its embedding erased).
            let mut written = 0usize;
            while !stop.load(relaxed) {
                let mut new =
                    memory_core::domain::NewMemory::new(org, MemoryType::Semantic, format!("written {written}"));
                new.embedding = Some(vector_with_similarity(0.4, 1 + written % 300));
                let mut tx = store::begin_for_org(&app, org).await.unwrap();
                store::memories::insert(&mut *tx, &new).await.unwrap();
                tx.commit().await.unwrap();
                if let Some(note) = notes.get(written / 2).filter(|_| written % 2 == 1) {
                    let selector = ForgetSelector::Memories(vec![*note]);
                    memory_core::lifecycle::forget::forget(&app, org, &selector).await.unwrap();
                }
                written += 1;
            }
            written
        }
    });

    let missing_or_stale = async || -> (i64, i64) {
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        let counts = sqlx::query_as(
            "SELECT (SELECT count(*) FROM memory m WHERE m.organization_id = $1 AND m.embedding IS NOT NULL \
                       AND NOT EXISTS (SELECT 1 FROM memory_vector v WHERE v.organization_id = m.organization_id \
                                       AND v.memory_id = m.id AND v.embedding = m.embedding)), \
                    (SELECT count(*) FROM memory_vector v WHERE v.organization_id = $1 AND NOT EXISTS \
                       (SELECT 1 FROM memory m WHERE m.organization_id = v.organization_id AND m.id = v.memory_id \
                        AND m.embedding IS NOT NULL))",
        )
        .bind(org)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        counts
    };
    let mut mover = store::ann::Mover::lock(&db.admin).await.unwrap();
    for round in 0..6 {
        mover.move_in(org).await.unwrap();
        assert_eq!(store::ann::indexed_tenants(&db.admin).await.unwrap(), vec![org]);
        assert_eq!(missing_or_stale().await, (0, 0), "round {round}: the partition after the move in");
        mover.move_out(org).await.unwrap();
        assert!(store::ann::indexed_tenants(&db.admin).await.unwrap().is_empty());
    }
    mover.move_in(org).await.unwrap();
    stop.store(true, relaxed);
    let (reads, written) = (reader.await.unwrap(), writer.await.unwrap());
    assert!(reads > 12 && written > 12, "{reads} reads, {written} writes");
    assert_eq!(missing_or_stale().await, (0, 0));

    let forgotten = memory_core::lifecycle::forget::forget(&db.app, org, &ForgetSelector::Memories(vec![nearest.id]))
        .await
        .unwrap();
    assert_eq!(forgotten, 1);
    assert_eq!(missing_or_stale().await, (0, 0), "the forgotten embedding left the partition");
}

/// Memories whose texts share a small vocabulary, some words repeated (tf > 1), of varied lengths: every query of
/// [`VOCABULARY_QUERIES`] matches many of them with many distinct scores.
fn vocabulary_texts(count: usize, seed: u64) -> Vec<String> {
    const WORDS: [&str; 12] = [
        "kestrel", "osprey", "heron", "falcon", "plover", "curlew", "merlin", "dunlin", "avocet", "godwit", "shrike",
        "wagtail",
    ];
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    (0..count)
        .map(|i| {
            let words = 2 + next(9) as usize;
            let mut text: Vec<&str> = (0..words).map(|_| WORDS[next(WORDS.len() as u64) as usize]).collect();
            text.push(["note", "entry", "record"][i % 3]);
            text.join(" ")
        })
        .collect()
}

const VOCABULARY_QUERIES: [&str; 5] =
    ["kestrel", "osprey heron", "falcon plover curlew merlin", "dunlin avocet -godwit", "shrike wagtail note"];

/// Ingests `texts` as one batch of organisation-wide memories (each embedded on its own axis, so none is a near
/// duplicate of another); returns their ids in order.
async fn ingest_texts(db: &Db, org: Uuid, batch_id: &str, texts: &[String], first_axis: usize) -> Vec<Uuid> {
    let embedder =
        texts.iter().enumerate().fold(FixedEmbedder::default(), |e, (i, text)| e.with(text, axis(first_axis + i)));
    let memories: Vec<serde_json::Value> = texts
        .iter()
        .map(|text| {
            serde_json::json!({
                "content": text, "memory_type": "semantic", "scope": "org", "confidence": 0.9,
                "provenance": {"source_kind": "conversation_turn", "source_ref": "run-1", "trust_level": "verified"}
            })
        })
        .collect();
    let batch: IngestBatch = serde_json::from_value(serde_json::json!({
        "job_type": "memory_ingest", "organization_id": org, "batch_id": batch_id, "memories": memories
    }))
    .unwrap();
    let receipt = Ingestor::new(db.app.clone(), Arc::new(embedder)).ingest(&batch, Admission::Active).await.unwrap();
    assert_eq!(receipt.memory_ids.len(), texts.len(), "every text is its own memory");
    receipt.memory_ids
}

/// The keyword branch against the row-wise reference for every query of [`VOCABULARY_QUERIES`], all matches
/// returned: the same memories, and position by position the same score.
async fn assert_branch_matches_reference(db: &Db, org: Uuid) {
    let scope = ReadFilter::for_retrieval(org, vec![Scope::Org], None, None, None, false);
    for text in VOCABULARY_QUERIES {
        let search = KeywordSearch {
            text_search_config: "memory_text",
            text,
            query: None,
            rows: 1_000,
            extras: BranchExtras::NONE,
            posting_budget: store::keyword::POSTING_BUDGET,
        };
        let mut tx = store::begin_keyword_search(&db.app, org, 5_000).await.unwrap();
        let scored = |rows: Vec<BranchRow>| -> Vec<(Uuid, f64)> {
            rows.into_iter().map(|r| (r.memory.id, r.keyword_score.unwrap())).collect()
        };
        let filters = SearchFilters::default();
        let bm25 = Bm25::default();
        let branch = scored(keyword::keyword_branch(&mut tx, &scope, &filters, &search, bm25).await.unwrap());
        let reference = scored(
            store::keyword::keyword_branch_exact(&mut tx, &scope, &filters, &search, (bm25.k1, bm25.b)).await.unwrap(),
        );
        tx.commit().await.unwrap();
        assert!(branch.len() > 3, "{text:?} matches several memories");
        assert_eq!(branch.len(), reference.len(), "{text:?}");
        for (b, r) in branch.iter().zip(&reference) {
            assert!((b.1 - r.1).abs() < 1e-9, "{text:?}: {b:?} against {r:?}");
        }
        let ids = |rows: &[(Uuid, f64)]| rows.iter().map(|r| r.0).collect::<std::collections::BTreeSet<_>>();
        assert_eq!(ids(&branch), ids(&reference), "{text:?}");
    }
}

/// Lexemes whose postings, as the branch reads them (the packed list less the postings gone since, plus the tail),
/// differ from `memory_posting`, their source of truth.
pub(crate) async fn postings_read_apart_from_truth(db: &Db, org: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "WITH listed AS (
             SELECT l.lexeme, substring(l.postings FROM i * 24 + 1 FOR 24) AS posting
             FROM memory_posting_list l, generate_series(0, length(l.postings) / 24 - 1) i
             WHERE l.organization_id = $1),
         read AS (
             SELECT lexeme, posting FROM listed
             WHERE NOT EXISTS (SELECT 1 FROM memory_posting_gone g
                               WHERE g.organization_id = $1 AND g.lexeme = listed.lexeme
                                 AND uuid_send(g.memory_id) = substring(listed.posting FROM 1 FOR 16))
             UNION ALL
             SELECT lexeme, uuid_send(memory_id) || int4send(tf) || int4send(doc_length) FROM memory_posting
             WHERE organization_id = $1 AND NOT packed),
         truth AS (
             SELECT lexeme, uuid_send(memory_id) || int4send(tf) || int4send(doc_length) AS posting
             FROM memory_posting WHERE organization_id = $1)
         SELECT DISTINCT lexeme FROM ((TABLE read EXCEPT ALL TABLE truth) UNION ALL (TABLE truth EXCEPT ALL TABLE read)) d
         ORDER BY 1",
    )
    .bind(org)
    .fetch_all(&db.admin)
    .await
    .unwrap()
}

/// (postings in the tail, postings recorded gone) of the organisation.
async fn unpacked(db: &Db, org: Uuid) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_posting WHERE organization_id = $1 AND NOT packed), \
                (SELECT count(*) FROM memory_posting_gone WHERE organization_id = $1)",
    )
    .bind(org)
    .fetch_one(&db.admin)
    .await
    .unwrap()
}

/// The branch reads the packed lists, their tails and what is gone from them; through ingest, the lifecycle sweep's
/// packing, text edits and forgetting, it ranks every query as the row-wise computation over `memory_posting` does.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_keyword_branch_ranks_as_the_row_wise_reference_through_writes_packing_edits_and_forgetting(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let texts = vocabulary_texts(90, 7);
    let first = ingest_texts(&db, org, "first", &texts[..60], 0).await;
    assert!(unpacked(&db, org).await.0 > 0, "what ingest wrote is the tail");
    assert_branch_matches_reference(&db, org).await;

    let report = sweep::run(&db.app, chrono::TimeDelta::hours(2), 100).await.unwrap();
    assert!(report.lexemes_packed >= 12, "{report:?}");
    assert_eq!(unpacked(&db, org).await, (0, 0));
    assert_branch_matches_reference(&db, org).await;

    ingest_texts(&db, org, "second", &texts[60..], 60).await;
    for (id, text) in [(first[0], "kestrel kestrel kestrel osprey"), (first[1], "a heron note")] {
        sqlx::query("UPDATE memory SET content = $2 WHERE id = $1")
            .bind(id)
            .bind(text)
            .execute(&db.admin)
            .await
            .unwrap();
    }
    let forgotten = ForgetSelector::Memories(first[2..6].to_vec());
    assert_eq!(memory_core::lifecycle::forget::forget(&db.app, org, &forgotten).await.unwrap(), 4);
    let (tail, gone) = unpacked(&db, org).await;
    assert!(tail > 0 && gone > 0, "lists, tails and postings gone from the lists: {tail}, {gone}");
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());
    assert_branch_matches_reference(&db, org).await;

    sweep::run(&db.app, chrono::TimeDelta::hours(2), 100).await.unwrap();
    assert_eq!(unpacked(&db, org).await, (0, 0));
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());
    assert_branch_matches_reference(&db, org).await;
}

/// A long list is packed again only once the postings written since reach a sixteenth of it: a few writes leave it as
/// it is, their postings read from the tail, and enough of them get it rewritten. Forgetting one memory gets it
/// rewritten at once: nothing of the forgotten text stays in the lists or in what is recorded gone from them.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_long_list_is_packed_again_only_once_its_new_postings_reach_a_share_of_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let texts: Vec<String> = (0..51).map(|i| format!("a kestrel over marsh number {i}")).collect();
    // The lifecycle sweep packs what is due, as it runs on its schedule.
    let sweep = || async { sweep::run(&db.app, chrono::TimeDelta::hours(2), 100).await.unwrap() };
    let kestrel_tail = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM memory_posting WHERE organization_id = $1 AND lexeme = 'kestrel' AND NOT packed",
        )
        .bind(org)
        .fetch_one(&db.admin)
        .await
        .unwrap()
    };
    ingest_texts(&db, org, "first", &texts[..48], 0).await;
    sweep().await;
    assert_eq!(kestrel_tail().await, 0);

    ingest_texts(&db, org, "second", &texts[48..50], 48).await;
    sweep().await;
    assert_eq!(kestrel_tail().await, 2, "two new postings of a 48-posting list stay in the tail");
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());

    let third = ingest_texts(&db, org, "third", &texts[50..], 50).await;
    sweep().await;
    assert_eq!(kestrel_tail().await, 0, "three are a sixteenth of the list: it is packed again");
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());

    let forgotten = ForgetSelector::Memories(third.clone());
    assert_eq!(memory_core::lifecycle::forget::forget(&db.app, org, &forgotten).await.unwrap(), 1);
    sweep().await;
    let traces: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_posting_list l, generate_series(0, length(l.postings) / 24 - 1) i \
                 WHERE l.organization_id = $1 AND substring(l.postings FROM i * 24 + 1 FOR 16) = uuid_send($2)), \
                (SELECT count(*) FROM memory_posting_gone WHERE organization_id = $1)",
    )
    .bind(org)
    .bind(third[0])
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(traces, (0, 0), "the forgotten memory's postings, listed and recorded gone");
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());
}

/// A packing that meets a text edit in flight does not wait for it: it leaves the postings the edit holds in the
/// tail, so those the edit deletes are in no list (nor recorded gone), and those it writes are the tail.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_packing_skips_the_postings_of_a_text_edit_in_flight(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let ids = ingest_texts(&db, org, "first", &vocabulary_texts(40, 11), 0).await;

    let mut edit = db.admin.begin().await.unwrap();
    sqlx::query("UPDATE memory SET content = 'a kestrel and an osprey' WHERE id = $1")
        .bind(ids[0])
        .execute(&mut *edit)
        .await
        .unwrap();
    assert!(store::keyword::pack(&db.app, org, store::keyword::PACK_POSTINGS).await.unwrap() > 0);
    edit.commit().await.unwrap();

    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());
    assert_eq!(unpacked(&db, org).await, (2, 0), "the edit's two postings are the tail; no packed one was deleted");
    assert_branch_matches_reference(&db, org).await;
}

/// A text edit that meets a packing in flight waits for the postings the packing marked, then records those it
/// deletes as gone from the new lists.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_text_edit_waiting_for_a_packing_records_the_packed_postings_it_deletes(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let texts = vocabulary_texts(60, 13);
    ingest_texts(&db, org, "first", &texts[..30], 0).await;
    while store::keyword::pack(&db.app, org, store::keyword::PACK_POSTINGS).await.unwrap() > 0 {}
    let second = ingest_texts(&db, org, "second", &texts[30..], 30).await;

    // The lists held, so the next packing stops after marking the tail, before writing them.
    let mut hold = db.admin.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM memory_posting_list WHERE organization_id = $1 FOR UPDATE")
        .bind(org)
        .execute(&mut *hold)
        .await
        .unwrap();
    let packing = tokio::spawn({
        let pool = db.app.clone();
        async move { store::keyword::pack(&pool, org, store::keyword::PACK_POSTINGS).await.unwrap() }
    });
    assert_eq!(lock_waiters(&db, 1).await, 1, "the packing waits for the held lists");
    let edit = tokio::spawn({
        let admin = db.admin.clone();
        async move {
            sqlx::query("UPDATE memory SET content = 'a kestrel and an osprey' WHERE id = $1")
                .bind(second[0])
                .execute(&admin)
                .await
                .unwrap();
        }
    });
    assert_eq!(lock_waiters(&db, 2).await, 2, "the edit waits for the postings the packing marked");
    hold.commit().await.unwrap();
    assert!(packing.await.unwrap() > 0);
    edit.await.unwrap();

    assert!(unpacked(&db, org).await.1 > 0, "the edit recorded the packed postings it deleted as gone");
    assert_eq!(postings_read_apart_from_truth(&db, org).await, Vec::<String>::new());
    assert_branch_matches_reference(&db, org).await;
}

/// A strategy search returns an entity's profile once: of the partitions' profiles the caller may read, the one
/// built from the most sources, as the modes attach it; a caller who reads one partition only gets that one.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_search_returns_one_profile_of_an_entity(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::llm::{InvocationPurpose, ScriptedLlm};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let project = Uuid::now_v7();
    let everyone = memory(org, "billing-api retries webhooks").embedding(axis(0)).insert(&db).await;
    let in_project = memory(org, "billing-api deploys on Fridays")
        .scope(Scope::Project)
        .project(project)
        .embedding(axis(0))
        .insert(&db)
        .await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    let entity = store::entities::upsert(&mut *tx, org, "service", "billing-api").await.unwrap();
    for m in [&everyone, &in_project] {
        store::entities::add_mention(&mut *tx, org, entity, m.id).await.unwrap();
    }
    tx.commit().await.unwrap();
    // Each partition's profile says what its sources say (near-duplicate texts would be left out as such).
    let llm = Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemorySynthesis, |request| {
        let fridays = if request.prompt.contains("Fridays") { ", deployed on Fridays" } else { "" };
        Ok(format!("billing-api: the payments service, which retries webhooks{fridays}"))
    }));
    let profile_text = "billing-api: the payments service, which retries webhooks";
    let embedder = FixedEmbedder::default()
        .with(profile_text, axis(0))
        .with(&format!("{profile_text}, deployed on Fridays"), axis(0))
        .with("billing-api payments", axis(0));
    let embedder = Arc::new(embedder);
    let synthesis = memory_core::lifecycle::synthesis::EntitySynthesizer::new(llm, Some(embedder.clone()))
        .synthesize_profile(&db.app, org, entity)
        .await
        .unwrap();
    assert_eq!(synthesis.written, 2, "the organisation's partition and the project's");
    let widest = synthesis.primary().unwrap().profile.id;

    let agent = integration_tests::agent_with_scopes(&db, org, &[Scope::Org, Scope::Project]).await;
    let r = retriever(&db, embedder, None);
    for strategy in [Strategy::Keyword, Strategy::Vector, Strategy::Hybrid, Strategy::Graph] {
        for (project_id, expected) in [(Some(project), widest), (None, synthesis.profiles.last().unwrap().profile.id)] {
            let mut request = search(org, "billing-api payments", strategy);
            request.agent_id = Some(agent);
            request.project_id = project_id;
            let hits = r.search(request).await.unwrap();
            let profiles: Vec<Uuid> = hits
                .hits
                .iter()
                .filter(|h| h.memory.memory_type == MemoryType::EntityProfile)
                .map(|h| h.memory.id)
                .collect();
            assert_eq!(profiles, vec![expected], "{strategy:?}, project {project_id:?}");
        }
    }
}
