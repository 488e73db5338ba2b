//! Retrieval as of a past time: the memories active then, through the lifecycle's own transitions (a contradiction's
//! supersession, a merge, an expiry, a forget), their chains cut at that time.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use integration_tests::{Db, FixedEmbedder, axis, contradicted_by, memory, retriever};
use memory_core::{
    lifecycle::{
        dedup::{DedupPair, Deduper},
        forget::{ForgetSelector, forget},
    },
    llm::{InvocationPurpose, ScriptedLlm},
    retrieval::{RetrievalMode, RetrievalRequest, RetrievalResult, Retriever, SearchRequest, Strategy},
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

const QUERY: &str = "billing-api deploy window";

/// A moment between two steps: the database's clock moves past it before the next step begins.
async fn moment() -> DateTime<Utc> {
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let at = Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    at
}

/// The answer as of `at` (recency measured from it too, as the API asks).
async fn answer_at(retriever: &Retriever, org: Uuid, at: Option<DateTime<Utc>>) -> RetrievalResult {
    let mut request = RetrievalRequest::new(org, RetrievalMode::AgentQuery, QUERY);
    request.as_of(at);
    retriever.query(request).await.unwrap()
}

async fn contents_at(retriever: &Retriever, org: Uuid, at: Option<DateTime<Utc>>) -> Vec<String> {
    let result = answer_at(retriever, org, at).await;
    if at.is_some() {
        for m in &result.memories {
            assert!(m.memory.superseded_by.is_none() && m.memory.archived_at.is_none(), "its chain cut then");
        }
    }
    let mut contents: Vec<String> = result.memories.into_iter().map(|m| m.memory.content).collect();
    contents.sort();
    contents
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn as_of_a_past_time_retrieval_answers_with_the_memories_active_then(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let tuesday = memory(org, "billing-api deploys on Tuesdays").embedding(axis(0)).insert(&db).await;
    let port = memory(org, "billing-api listens on port 8080").embedding(axis(0)).insert(&db).await;
    let tls = memory(org, "billing-api serves TLS on 8080").embedding(axis(0)).insert(&db).await;
    let mut expiring = memory(org, "billing-api deploys are frozen this week").embedding(axis(0));
    expiring.new.expires_at = Some(Utc::now() + chrono::Duration::hours(1));
    let expiring = expiring.insert(&db).await;
    let secret = memory(org, "billing-api deploy key rotates monthly").embedding(axis(0)).insert(&db).await;
    let first = moment().await;

    // A contradiction supersedes Tuesday by Thursday.
    contradicted_by(&db, &tuesday, "billing-api", "billing-api deploys on Thursdays").await;
    let second = moment().await;
    let embedder = Arc::new(FixedEmbedder::default().with(QUERY, axis(0)));
    let retriever = retriever(&db, embedder, None);
    let answered_then = answer_at(&retriever, org, Some(second)).await;

    // A merge of the two port memories; the freeze expires; the key memory is forgotten.
    let llm = Arc::new(
        ScriptedLlm::new()
            .on(InvocationPurpose::MemoryDedup, |_| Ok(r#"{"decisions":[{"pair":0,"decision":"merge"}]}"#.into()))
            .on(InvocationPurpose::MemoryMerge, |_| Ok("billing-api listens on port 8080 over TLS".into())),
    );
    Deduper::new(llm, None).review_cluster(&db.app, org, &[DedupPair { a: port.id, b: tls.id }]).await.unwrap();
    // The freeze's end comes forward to now (after `second`), and the sweep archives it.
    let mut tx = memory_core::store::begin_for_org(&db.admin, org).await.unwrap();
    sqlx::query("UPDATE memory SET expires_at = now() WHERE id = $1")
        .bind(expiring.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let swept = memory_core::lifecycle::sweep::run(&db.app, chrono::TimeDelta::hours(2), i64::MAX).await.unwrap();
    assert_eq!(swept.archived_expired, 1);
    assert_eq!(forget(&db.app, org, &ForgetSelector::Memories(vec![secret.id])).await.unwrap(), 1);

    let at_first = contents_at(&retriever, org, Some(first)).await;
    assert_eq!(
        at_first,
        [
            "billing-api deploys are frozen this week",
            "billing-api deploys on Tuesdays",
            "billing-api listens on port 8080",
            "billing-api serves TLS on 8080",
        ],
        "the forgotten memory never, Thursday not yet written"
    );
    let at_second = contents_at(&retriever, org, Some(second)).await;
    assert_eq!(
        at_second,
        [
            "billing-api deploys are frozen this week",
            "billing-api deploys on Thursdays",
            "billing-api listens on port 8080",
            "billing-api serves TLS on 8080",
        ],
        "Tuesday superseded, the merge not yet made"
    );
    // Replayed after the merge, the expiry and the forget, with its record and time: the same answer, but for the
    // memory forgotten since.
    let replayed = answer_at(&retriever, org, Some(second)).await;
    assert_eq!(replayed.record, answered_then.record);
    let listed = |r: &RetrievalResult| r.memories.iter().map(|m| (m.memory.id, m.score)).collect::<Vec<_>>();
    let mut expected = listed(&answered_then);
    assert!(expected.iter().any(|(id, _)| *id == secret.id), "the key memory was answered then");
    expected.retain(|(id, _)| *id != secret.id);
    assert_eq!(listed(&replayed), expected);
    let now = contents_at(&retriever, org, None).await;
    assert_eq!(now, ["billing-api deploys on Thursdays", "billing-api listens on port 8080 over TLS"]);
    assert_eq!(contents_at(&retriever, org, Some(Utc::now())).await, now, "as of now is now");

    // Search reads the same way; passive injection, a future time and the archive with a time are refused.
    let mut search = SearchRequest::new(org, Strategy::Keyword, "Tuesdays");
    search.filters.as_of = Some(first);
    let hits = retriever.search(search.clone()).await.unwrap().hits;
    assert_eq!(hits.iter().map(|h| h.memory.id).collect::<Vec<_>>(), [tuesday.id]);
    assert!(hits[0].memory.superseded_by.is_none());
    search.filters.as_of = None;
    assert!(retriever.search(search).await.unwrap().hits.is_empty(), "superseded now");
    let refused = |mode, at: DateTime<Utc>, archive| {
        let mut request = RetrievalRequest::new(org, mode, QUERY);
        (request.active_at, request.include_archive) = (Some(at), archive);
        request
    };
    for request in [
        refused(RetrievalMode::Passive, first, false),
        refused(RetrievalMode::AgentQuery, Utc::now() + chrono::Duration::hours(1), false),
        refused(RetrievalMode::AgentQuery, first, true),
    ] {
        let error = retriever.query(request).await.unwrap_err();
        assert!(matches!(error, memory_core::Error::Validation(_)), "{error}");
    }
}
