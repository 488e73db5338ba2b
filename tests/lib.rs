//! Helpers shared by the integration tests: pools for a per-test database, the real MiniLM model, embedders
//! with fixed vectors for the spec's deterministic tests, and memory fixtures.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use memory_core::{
    domain::{Memory, MemoryType, NewMemory, Scope},
    embed::{EmbedError, Embedder, MiniLm},
    llm::Llm,
    retrieval::{RetrievalConfig, Retriever},
    store,
};
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use uuid::Uuid;

pub const DIM: usize = 384;

/// Pools on one test database: `admin` as the owner (migrations, fixtures), `app` as memory_app (RLS applies).
pub struct Db {
    pub admin: PgPool,
    pub app: PgPool,
}

impl Db {
    pub async fn new(pool_options: PgPoolOptions, connect: PgConnectOptions) -> Self {
        let admin = pool_options.clone().connect_with(connect.clone()).await.expect("admin pool");
        let app = memory_core::store::connections::pool_options()
            .max_connections(4)
            .connect_with(connect.username("memory_app").password(""))
            .await
            .expect("app pool");
        Self { admin, app }
    }
}

/// An organisation's export, every batch collected.
pub async fn exported(pool: &PgPool, from: Uuid, to: Uuid) -> Vec<memory_core::ingest::IngestBatch> {
    let mut batches = Vec::new();
    memory_core::ingest::export::export(pool, from, to, |batch| {
        batches.push(batch);
        Ok(())
    })
    .await
    .expect("export");
    batches
}

/// The model directory installed by the local stack.
pub fn model_dir() -> PathBuf {
    std::env::var("MEMORY_MODEL_DIR").expect("MEMORY_MODEL_DIR (run the tests through `make test`)").into()
}

/// One MiniLM per test binary: the weights load once.
pub fn minilm() -> Arc<MiniLm> {
    static MODEL: OnceLock<Arc<MiniLm>> = OnceLock::new();
    MODEL.get_or_init(|| Arc::new(MiniLm::new(model_dir()).expect("MiniLM model directory"))).clone()
}

/// Embeds known texts as given vectors; any other text is an error (which the pipeline treats as an outage).
#[derive(Default)]
pub struct FixedEmbedder {
    vectors: HashMap<String, Vec<f32>>,
}

impl FixedEmbedder {
    pub fn with(mut self, text: &str, vector: Vec<f32>) -> Self {
        self.vectors.insert(text.to_string(), vector);
        self
    }
}

#[async_trait]
impl Embedder for FixedEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }
    fn model_id(&self) -> &str {
        "fixed"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts
            .iter()
            .map(|t| {
                self.vectors.get(t).cloned().ok_or_else(|| EmbedError::Unavailable(format!("no vector for {t:?}")))
            })
            .collect()
    }
}

/// An embedder that is down.
pub struct DownEmbedder;

#[async_trait]
impl Embedder for DownEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }
    fn model_id(&self) -> &str {
        "down"
    }
    async fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Unavailable("embedding service unreachable".into()))
    }
}

/// A unit vector: cosine `similarity` to `axis(0)`, the rest of its weight on axis `other`.
pub fn vector_with_similarity(similarity: f32, other: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIM];
    v[0] = similarity;
    v[other] = (1.0 - similarity * similarity).max(0.0).sqrt();
    v
}

pub fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIM];
    v[i] = 1.0;
    v
}

/// A retriever ranking by the spec's formula, as the spec's own tests assume.
pub fn retriever(db: &Db, embedder: Arc<dyn Embedder>, llm: Option<Arc<dyn Llm>>) -> Retriever {
    Retriever::new(db.app.clone(), embedder, llm, RetrievalConfig::spec())
}

/// A retriever with the settings the service ships (`RetrievalConfig::default()`).
pub fn shipped_retriever(db: &Db, embedder: Arc<dyn Embedder>) -> Retriever {
    Retriever::new(db.app.clone(), embedder, None, RetrievalConfig::default())
}

/// Builder for a memory fixture.
pub struct Fixture {
    pub new: NewMemory,
    pub taxonomy: Option<Vec<&'static str>>,
}

/// The secret of the tests' local HS256 authenticator.
pub const TEST_SECRET: &str = "test-secret-of-at-least-thirty-two-bytes";

/// The retrieve app over `retriever`, authenticating local tokens signed with [`TEST_SECRET`].
pub fn local_app(retriever: Retriever) -> axum::Router {
    retrieve::app(local_state(retriever))
}

/// [`local_app`]'s state, to add to before serving.
pub fn local_state(retriever: Retriever) -> retrieve::AppState {
    use retrieve::auth::{LOCAL_AUDIENCE, LOCAL_ISSUER};
    let auth = retrieve::Authenticator::local(&TEST_SECRET.to_string().into(), LOCAL_ISSUER, LOCAL_AUDIENCE);
    retrieve::AppState::new(retriever, auth.unwrap())
}

/// A local token for `org` (acting as `agent`, with `scope` when given), valid ten minutes.
pub fn local_token(org: Uuid, agent: Option<Uuid>, scope: Option<&str>) -> String {
    let local = retrieve::Claims::local(org, agent, std::time::Duration::from_secs(600));
    let claims = retrieve::Claims { scope: scope.map(str::to_string), ..local };
    retrieve::auth::sign_local_token(TEST_SECRET, &claims).expect("a token")
}

/// The retrieve app behind API Gateway's authorizer, for the API id and stage of the sample events in `events/`.
pub fn sample_event_app(retriever: Retriever) -> axum::Router {
    retrieve::app(retrieve::AppState::new(
        retriever,
        retrieve::Authenticator::ApiGateway {
            api_id: Some("abc123".into()),
            stage: Some("$default".into()),
            issuer: None,
            audiences: Vec::new(),
            keys: None,
        },
    ))
}

pub fn memory(org: Uuid, content: &str) -> Fixture {
    let mut new = NewMemory::new(org, MemoryType::Semantic, content);
    new.confidence = 0.8;
    Fixture { new, taxonomy: None }
}

impl Fixture {
    pub fn embedding(mut self, v: Vec<f32>) -> Self {
        self.new.embedding = Some(v);
        self
    }
    pub fn scope(mut self, scope: Scope) -> Self {
        self.new.scope = scope;
        self
    }
    pub fn project(mut self, id: Uuid) -> Self {
        self.new.project_id = Some(id);
        self
    }
    pub fn task(mut self, id: Uuid) -> Self {
        self.new.project_task_id = Some(id);
        self
    }
    pub fn agent(mut self, id: Uuid) -> Self {
        self.new.agent_id = Some(id);
        self
    }
    pub fn restricted(mut self) -> Self {
        self.new.sensitivity = memory_core::domain::Sensitivity::Restricted;
        self
    }
    pub fn confidence(mut self, c: f64) -> Self {
        self.new.confidence = c;
        self
    }
    pub fn created_at(mut self, at: DateTime<Utc>) -> Self {
        self.new.created_at = Some(at);
        self
    }
    pub fn trust(mut self, level: memory_core::domain::TrustLevel) -> Self {
        self.new.provenance.trust_level = level;
        self
    }
    pub fn status(mut self, status: memory_core::domain::MemoryStatus) -> Self {
        self.new.status = status;
        self
    }
    pub fn memory_type(mut self, t: MemoryType) -> Self {
        self.new.memory_type = t;
        self
    }
    /// A chunk of the source file at `path`, anchored at `symbol` on `lines`.
    pub fn code(mut self, path: &str, symbol: &str, lines: std::ops::RangeInclusive<u32>) -> Self {
        self.new.file_path = Some(path.into());
        self.new.language = memory_core::repository::Language::of_path(path).map(|l| l.as_str().into());
        let (start_line, end_line) = lines.into_inner();
        self.new.anchor = Some(memory_core::domain::Anchor { symbol: symbol.into(), hash: None, start_line, end_line });
        self
    }
    /// Tags the memory with the taxonomy node at this path (creating the path).
    pub fn taxonomy(mut self, path: &[&'static str]) -> Self {
        self.taxonomy = Some(path.to_vec());
        self
    }

    /// Inserts through the owner's pool inside an organisation transaction.
    pub async fn insert(self, db: &Db) -> Memory {
        let org = self.new.organization_id;
        let mut tx = store::begin_for_org(&db.admin, org).await.expect("begin");
        let memory = store::memories::insert(&mut *tx, &self.new).await.expect("insert memory");
        if let Some(path) = self.taxonomy {
            let mut parent = None;
            for name in path {
                parent = Some(store::taxonomy::upsert_node(&mut *tx, org, parent, name).await.expect("node"));
            }
            store::taxonomy::tag(&mut *tx, org, memory.id, parent.expect("path")).await.expect("tag");
        }
        tx.commit().await.expect("commit");
        memory
    }
}

/// The number of outbox events of each type in an organisation, as `(type, count)` sorted by type.
pub async fn outbox_counts(db: &Db, org: Uuid) -> Vec<(String, i64)> {
    let mut tx = store::begin_for_org(&db.admin, org).await.expect("begin");
    sqlx::query_as(
        "SELECT event_type, count(*) FROM domain_event_outbox WHERE organization_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(org)
    .fetch_all(&mut *tx)
    .await
    .expect("outbox counts")
}

/// Makes every memory mention one entity (created by name) and returns the entity's id.
pub async fn mention_all(db: &Db, org: Uuid, entity: &str, memories: &[&Memory]) -> Uuid {
    let mut tx = store::begin_for_org(&db.admin, org).await.expect("begin");
    let entity = store::entities::upsert(&mut *tx, org, "service", entity).await.expect("entity");
    for m in memories {
        store::entities::add_mention(&mut *tx, org, entity, m.id).await.expect("mention");
    }
    tx.commit().await.expect("commit");
    entity
}

/// `old`'s successor through the contradiction job: a confident candidate saying `text` (cosine 0.8 to `old`'s
/// vector, both mentioning the entity `entity`), checked with [`everything_contradicts`]. Returns it and the entity.
pub async fn contradicted_by(db: &Db, old: &Memory, entity: &str, text: &str) -> (Memory, Uuid) {
    let org = old.organization_id;
    let new = memory(org, text)
        .embedding(vector_with_similarity(0.8, 1))
        .confidence(0.9)
        .status(memory_core::domain::MemoryStatus::Candidate)
        .insert(db)
        .await;
    let entity = mention_all(db, org, entity, &[old, &new]).await;
    let detector = memory_core::lifecycle::contradiction::ContradictionDetector::new(everything_contradicts());
    let superseded = detector.check(&db.app, org, new.id).await.expect("the check runs");
    assert_eq!(superseded.iter().map(|m| m.id).collect::<Vec<_>>(), [old.id], "{text} supersedes {}", old.content);
    (new, entity)
}

/// A scripted model that labels every screened pair contradictory.
pub fn everything_contradicts() -> Arc<memory_core::llm::ScriptedLlm> {
    use memory_core::llm::{InvocationPurpose, ScriptedLlm};
    Arc::new(ScriptedLlm::new().on(InvocationPurpose::MemoryContradiction, |req| {
        let n = req.prompt.matches("Existing ").count();
        let relations: Vec<String> =
            (0..n).map(|i| format!(r#"{{"memory": {i}, "relation": "contradictory"}}"#)).collect();
        Ok(format!(r#"{{"relations": [{}]}}"#, relations.join(",")))
    }))
}

/// Gives an agent a profile with these read scopes.
pub async fn agent_with_scopes(db: &Db, org: Uuid, scopes: &[Scope]) -> Uuid {
    let agent = Uuid::now_v7();
    let mut tx = store::begin_for_org(&db.admin, org).await.expect("begin");
    store::agents::upsert(&mut *tx, org, agent, "test-agent", scopes).await.expect("agent");
    tx.commit().await.expect("commit");
    agent
}

/// Sessions of this test's database waiting for a lock, once at least `at_least` are (or after 10 s).
pub async fn lock_waiters(db: &Db, at_least: i64) -> i64 {
    let mut waiting = 0;
    for _ in 0..200 {
        waiting = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&db.admin)
        .await
        .unwrap();
        if waiting >= at_least {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    waiting
}

/// A new queue whose messages move to a new dead-letter queue after two receives: (queue, dead-letter queue).
pub async fn queue_with_dead_letters(sqs: &aws_sdk_sqs::Client) -> (String, String) {
    let name = format!("t-{}", Uuid::now_v7().simple());
    let dlq = sqs.create_queue().queue_name(format!("{name}-dlq")).send().await.unwrap().queue_url.unwrap();
    let arn_name = aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    let attributes = sqs.get_queue_attributes().queue_url(&dlq).attribute_names(arn_name.clone()).send().await.unwrap();
    let dlq_arn = attributes.attributes.unwrap()[&arn_name].clone();
    let redrive = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}).to_string();
    let queue = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy, redrive)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (queue, dlq)
}

/// Sends `body` to `queue` and fails it as a worker does (receives it and leaves it) until SQS moves it to the
/// dead-letter queue.
pub async fn dead_letter(sqs: &aws_sdk_sqs::Client, queue: &str, body: &str) {
    sqs.send_message().queue_url(queue).message_body(body).send().await.unwrap();
    for _ in 0..3 {
        sqs.receive_message().queue_url(queue).visibility_timeout(0).send().await.unwrap();
    }
}

/// The AWS SDK's configuration for the local stack's endpoint (moto).
pub async fn local_aws() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL (run through `make test`)"))
        .load()
        .await
}
