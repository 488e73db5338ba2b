//! The retrieve API under hostile input and outages, through the router: who may call, what one request may cost,
//! and what a caller sees when something is broken.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use integration_tests::{DIM, Db, FixedEmbedder, axis, memory, retriever};
use memory_core::{
    embed::{EmbedError, Embedder},
    retrieval::{RetrievalConfig, Retriever},
};
use retrieve::{
    AppState, Authenticator, Claims,
    auth::{LOCAL_AUDIENCE, LOCAL_ISSUER, sign_local_token},
};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tower::ServiceExt;
use uuid::Uuid;

const SECRET: &str = "hardening-secret-of-at-least-32-bytes";

fn app(retriever: Retriever) -> axum::Router {
    let auth = Authenticator::local(&SECRET.to_string().into(), LOCAL_ISSUER, LOCAL_AUDIENCE).unwrap();
    retrieve::app(AppState::new(retriever, auth))
}

fn claims(org: Uuid) -> Claims {
    Claims {
        org_id: org.to_string(),
        exp: Some(chrono::Utc::now().timestamp() as u64 + 600),
        iss: Some(LOCAL_ISSUER.into()),
        aud: Some(LOCAL_AUDIENCE.into()),
        ..Claims::default()
    }
}

async fn call(app: &axum::Router, token: &str, uri: &str, body: Value) -> (StatusCode, header::HeaderMap, Value) {
    let request = Request::post(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn query(text: &str) -> Value {
    json!({"mode": "agent_query", "query": text, "max_results": 3})
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_token_without_exp_or_for_another_audience_is_refused_without_the_reason(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let app = app(retriever(&db, Arc::new(FixedEmbedder::default().with("q", axis(0))), None));
    let good = sign_local_token(SECRET, &claims(org)).unwrap();
    assert_eq!(call(&app, &good, "/v1/retrieve", query("q")).await.0, StatusCode::OK);

    let no_exp = sign_local_token(SECRET, &Claims { exp: None, ..claims(org) }).unwrap();
    let other_audience =
        sign_local_token(SECRET, &Claims { aud: Some("another-service".into()), ..claims(org) }).unwrap();
    let no_issuer = sign_local_token(SECRET, &Claims { iss: None, ..claims(org) }).unwrap();
    for token in [no_exp, other_audience, no_issuer] {
        let (status, _, body) = call(&app, &token, "/v1/retrieve", query("q")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["message"], "invalid or expired token", "the decoder's reason stays in the log");
    }
    assert!(Authenticator::local(&"short".to_string().into(), LOCAL_ISSUER, LOCAL_AUDIENCE).is_err());
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn what_one_request_may_ask_is_bounded(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "alpha bravo charlie").embedding(axis(0)).insert(&db).await;
    // Distinct words under the 8 KiB query limit: the keyword branch scores the 32 rarest and answers.
    let many: String = (0..1300).map(|i| format!("w{i:04}")).collect::<Vec<_>>().join(" ") + " alpha";
    let five_thousand: String = (0..5000).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let embedder = FixedEmbedder::default().with(&many, axis(0)).with("q", axis(0));
    let app = app(retriever(&db, Arc::new(embedder), None));
    let token = sign_local_token(SECRET, &claims(org)).unwrap();

    let (status, _, body) = call(&app, &token, "/v1/retrieve", query(&many)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["memories"][0]["memory"]["content"], "alpha bravo charlie");
    let (status, _, body) = call(&app, &token, "/v1/retrieve", query(&five_thousand)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")));

    let long_session = json!({"mode": "passive", "query": "q", "session_id": "s".repeat(129), "turn": 1});
    assert_eq!(call(&app, &token, "/v1/retrieve", long_session).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let tags: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
    for filters in [
        json!({"tags_any": tags}),
        json!({"created_after": "2026-02-01T00:00:00Z", "created_before": "2026-01-01T00:00:00Z"}),
        json!({"min_confidence": 7.0}),
    ] {
        let body = json!({"strategy": "keyword", "query": "alpha", "filters": filters});
        assert_eq!(call(&app, &token, "/v1/search", body).await.0, StatusCode::UNPROCESSABLE_ENTITY, "{filters}");
    }
}

#[tokio::test]
async fn an_unreachable_database_is_a_503_with_retry_after_and_healthz_says_so_without_details() {
    let nowhere = PgConnectOptions::new().host("127.0.0.1").port(1).username("memory_app").database("memory");
    let pool = PgPoolOptions::new().acquire_timeout(Duration::from_millis(500)).connect_lazy_with(nowhere);
    let embedder = Arc::new(FixedEmbedder::default().with("q", axis(0)));
    let app = app(Retriever::new(pool, embedder, None, RetrievalConfig::default()));
    let token = sign_local_token(SECRET, &claims(Uuid::now_v7())).unwrap();

    let started = std::time::Instant::now();
    let (status, headers, body) = call(&app, &token, "/v1/retrieve", query("q")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers[header::RETRY_AFTER], "1");
    assert!(started.elapsed() < Duration::from_secs(3), "answered within the acquire timeout");

    let response = app.clone().oneshot(Request::get("/healthz").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["message"], "database unreachable", "no internal error text");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn after_its_backend_is_killed_the_next_request_is_served_without_a_restart(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "alpha").embedding(axis(0)).insert(&db).await;
    let app = app(retriever(&db, Arc::new(FixedEmbedder::default().with("alpha", axis(0))), None));
    let token = sign_local_token(SECRET, &claims(org)).unwrap();
    assert_eq!(call(&app, &token, "/v1/retrieve", query("alpha")).await.0, StatusCode::OK);

    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
         WHERE usename = 'memory_app' AND datname = current_database()",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(!killed.is_empty() && killed.iter().all(|ended| *ended), "{killed:?}");
    // The pool's connections, released a moment ago, are handed out unchecked and found gone: the request runs again
    // on new ones.
    let (status, _, body) = call(&app, &token, "/v1/retrieve", query("alpha")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The pool hands out a connection released a moment ago unchecked (sqlx pinged it as it was released), which saves
/// a request a round trip per checkout; a transaction that finds such a connection gone at `BEGIN` begins again on
/// another; after a pause, every connection is checked. (Pauses of 60 s and 300 ms here for the service's 1 s.)
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_pool_checks_a_connection_before_use_after_a_pause_not_between_busy_checkouts(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::store::connections::pool_options_checking_after;
    let admin = opts.connect_with(conn.clone()).await.unwrap();
    let app = conn.username("memory_app");
    let pid = "SELECT pg_backend_pid()";
    let backend = async |pool: &PgPool| sqlx::query_scalar::<_, i32>(pid).fetch_one(pool).await;
    let terminate = async |pid: i32| {
        let ended: bool =
            sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)").bind(pid).fetch_one(&admin).await.unwrap();
        assert!(ended, "backend {pid} ended");
    };

    // Released connections are pinged, then idle: wait for that, so that a checkout does not open another instead.
    let idle = async |pool: &PgPool, n: usize| {
        let settled = async {
            while pool.num_idle() < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), settled).await.expect("released connections settle");
    };

    // `connect_with` leaves one connection idle, released unchecked: the first checkout (which checks what the pool
    // holds) takes it, and the one after is the first left to the rule.
    let busy = pool_options_checking_after(Duration::from_secs(60)).max_connections(2).connect_with(app.clone());
    let busy = busy.await.unwrap();
    let first = backend(&busy).await.unwrap();
    idle(&busy, 1).await;
    terminate(first).await;
    backend(&busy).await.expect_err("a connection released a moment ago is handed out unchecked, and found gone");
    let second = backend(&busy).await.expect("the gone connection was closed as it was released");
    assert_ne!(second, first);

    // Both of the pool's connections gone: a transaction begins on neither.
    let (mut a, mut b) = (busy.acquire().await.unwrap(), busy.acquire().await.unwrap());
    let both: Vec<i32> = vec![
        sqlx::query_scalar(pid).fetch_one(&mut *a).await.unwrap(),
        sqlx::query_scalar(pid).fetch_one(&mut *b).await.unwrap(),
    ];
    drop((a, b));
    idle(&busy, 2).await;
    for gone in &both {
        terminate(*gone).await;
    }
    let mut tx = memory_core::store::begin_for_org(&busy, Uuid::now_v7()).await.expect("begun on a live connection");
    let began_on: i32 = sqlx::query_scalar(pid).fetch_one(&mut *tx).await.unwrap();
    assert!(!both.contains(&began_on), "{began_on} is one of the ended {both:?}");
    tx.commit().await.unwrap();

    let paused = pool_options_checking_after(Duration::from_millis(300)).max_connections(1).connect_with(app);
    let paused = paused.await.unwrap();
    let third = backend(&paused).await.unwrap();
    idle(&paused, 1).await;
    terminate(third).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let last = backend(&paused).await.expect("after a pause the connection is checked and replaced");
    assert_ne!(last, third);
}

/// A read on a request's path ends its transaction without the request waiting for a `COMMIT`: the `ROLLBACK` goes
/// out as its connection is released. The connection comes back out of the transaction with none of the read's
/// settings, whether the read was a retrieval's branches, a strategy search or a read by id.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_read_ends_its_transaction_as_its_connection_is_released(opts: PgPoolOptions, conn: PgConnectOptions) {
    use memory_core::retrieval::{RetrievalMode, RetrievalRequest, SearchRequest, Strategy};
    let db = Db::new(opts, conn.clone()).await;
    let org = Uuid::now_v7();
    let m = memory(org, "alpha beta gamma").embedding(axis(1)).insert(&db).await;
    let one = memory_core::store::connections::pool_options().max_connections(1);
    let one = one.connect_with(conn.username("memory_app").password("")).await.unwrap();
    let settings = "SELECT current_setting('statement_timeout'), current_setting('plan_cache_mode'), \
                    coalesce(current_setting('app.organization_id', true), '')";
    let fresh: (String, String, String) = sqlx::query_as(settings).fetch_one(&one).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&one).await.unwrap();
    let embedder = FixedEmbedder::default().with("alpha", axis(1)).with("beta", axis(1)).with("gamma", axis(1));
    let config = RetrievalConfig { read_budget_ms: 1234, found_cache_bytes: 0, ..RetrievalConfig::default() };
    let r = Retriever::new(one.clone(), Arc::new(embedder), None, config);

    // Once the read is done, the one connection is the same backend, idle outside a transaction, as it began.
    let came_back = async || {
        let mut held = one.acquire().await.unwrap();
        let (state, in_transaction): (String, bool) =
            sqlx::query_as("SELECT state, xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = $1")
                .bind(pid)
                .fetch_one(&db.admin)
                .await
                .unwrap();
        assert_eq!((state.as_str(), in_transaction), ("idle", false), "backend {pid} after a read");
        assert_eq!(sqlx::query_as::<_, (String, String, String)>(settings).fetch_one(&mut *held).await.unwrap(), fresh);
    };
    let answer = r.query(RetrievalRequest::new(org, RetrievalMode::AgentQuery, "alpha")).await.unwrap();
    assert!(!answer.degraded, "both branches answered, one after the other: {:?}", answer.degraded_reasons);
    assert_eq!(answer.memories.iter().map(|a| a.memory.id).collect::<Vec<_>>(), vec![m.id]);
    came_back().await;
    for strategy in [Strategy::Keyword, Strategy::Metadata] {
        let found = r.search(SearchRequest::new(org, strategy, "beta")).await.unwrap();
        assert_eq!(found.hits.len(), 1, "{strategy:?}");
        came_back().await;
    }
    assert_eq!(r.memory(org, None, m.id).await.unwrap().id, m.id);
    came_back().await;
}

/// Panics when asked to embed "panic".
struct PanickingEmbedder;

#[async_trait]
impl Embedder for PanickingEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }
    fn model_id(&self) -> &str {
        "panicking"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        assert!(texts.iter().all(|t| t != "panic"), "a bug in a handler");
        Ok(texts.iter().map(|_| axis(0)).collect())
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_handler_panic_answers_500_and_the_next_request_is_served_with_request_ids(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let app = app(retriever(&db, Arc::new(PanickingEmbedder), None));
    let token = sign_local_token(SECRET, &claims(org)).unwrap();
    let (status, headers, body) = call(&app, &token, "/v1/retrieve", query("panic")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("internal")));
    assert!(headers.contains_key("x-request-id"));
    let (status, headers, _) = call(&app, &token, "/v1/retrieve", query("fine")).await;
    assert_eq!(status, StatusCode::OK);

    // A caller's request id is kept.
    let request = Request::get("/openapi.json").header("x-request-id", "caller-42").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.headers()["x-request-id"], "caller-42");
    assert_ne!(headers["x-request-id"], "caller-42");
}

mod cooldown_across_instances {
    use std::collections::HashMap;

    use integration_tests::{Db, FixedEmbedder, memory, vector_with_similarity};
    use memory_core::retrieval::{
        RetrievalConfig, RetrievalMode, RetrievalRequest, Retriever, SessionTurn, cooldown_token::TokenKey,
    };
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::sync::Arc;
    use uuid::Uuid;

    /// Serves turns 1..=12 alternately from two instances; returns, per memory, the turns it was injected at.
    async fn serve(instances: &[Retriever; 2], org: Uuid, echo: bool) -> HashMap<Uuid, Vec<u32>> {
        let mut injected: HashMap<Uuid, Vec<u32>> = HashMap::new();
        let mut token = None;
        for turn in 1..=12u32 {
            let mut request = RetrievalRequest::new(org, RetrievalMode::Passive, "deploy checklist");
            request.max_results = 2;
            request.session = Some(SessionTurn { session_id: "s-1".into(), turn });
            request.cooldown_token = if echo { token.clone() } else { None };
            let result = instances[(turn % 2) as usize].query(request).await.unwrap();
            for m in &result.memories {
                injected.entry(m.memory.id).or_default().push(turn);
            }
            token = result.cooldown_token;
        }
        injected
    }

    fn repeats_within_five_turns(injected: &HashMap<Uuid, Vec<u32>>) -> bool {
        injected.values().any(|turns| turns.windows(2).any(|w| w[1] - w[0] < 5))
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn two_instances_serving_alternate_turns_never_repeat_a_memory_within_five_turns(
        opts: PgPoolOptions,
        conn: PgConnectOptions,
    ) {
        let db = Db::new(opts, conn).await;
        let org = Uuid::now_v7();
        for i in 0..12 {
            let similarity = 0.95 - i as f32 * 0.01;
            memory(org, &format!("deploy checklist item {i}"))
                .embedding(vector_with_similarity(similarity, 1 + i))
                .insert(&db)
                .await;
        }
        let key = TokenKey::from_secret(b"the key every instance of the deployment shares").unwrap();
        let instance = || {
            let embedder = Arc::new(FixedEmbedder::default().with("deploy checklist", integration_tests::axis(0)));
            Retriever::new(db.app.clone(), embedder, None, RetrievalConfig::spec()).with_cooldown_key(key.clone())
        };
        let with_token = serve(&[instance(), instance()], org, true).await;
        assert!(!repeats_within_five_turns(&with_token), "{with_token:?}");
        // Without the token each instance knows only its own turns, and repeats what the other injected.
        let without = serve(&[instance(), instance()], org, false).await;
        assert!(repeats_within_five_turns(&without), "{without:?}");
    }
}

/// `project_id` and `task_id` narrow what the read scopes allow; they are not access control (ARCHITECTURE.md).
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn project_id_narrows_within_the_read_scopes_and_is_not_access_control(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{
        domain::Scope,
        retrieval::{RetrievalMode, RetrievalRequest},
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    let in_p = memory(org, "deploy notes of P").scope(Scope::Project).project(p).embedding(axis(0)).insert(&db).await;
    let in_q = memory(org, "deploy notes of Q").scope(Scope::Project).project(q).embedding(axis(0)).insert(&db).await;
    let with_projects = integration_tests::agent_with_scopes(&db, org, &[Scope::Org, Scope::Project]).await;
    let org_only = integration_tests::agent_with_scopes(&db, org, &[Scope::Org]).await;
    let r = retriever(&db, Arc::new(FixedEmbedder::default().with("deploy", axis(0))), None);
    let ask = |agent: Uuid, project: Option<Uuid>| {
        let mut request = RetrievalRequest::new(org, RetrievalMode::AgentQuery, "deploy");
        request.agent_id = Some(agent);
        request.project_id = project;
        request
    };
    let ids = |result: memory_core::retrieval::RetrievalResult| -> Vec<Uuid> {
        result.memories.iter().map(|m| m.memory.id).collect()
    };
    assert_eq!(ids(r.query(ask(with_projects, Some(p))).await.unwrap()), vec![in_p.id]);
    assert_eq!(ids(r.query(ask(with_projects, Some(q))).await.unwrap()), vec![in_q.id], "any project, by naming it");
    assert!(ids(r.query(ask(with_projects, None)).await.unwrap()).is_empty(), "no project named, none read");
    assert!(ids(r.query(ask(org_only, Some(p))).await.unwrap()).is_empty(), "the read scopes are the access control");
}

/// Embedder down and the keyword branch failing leave nothing to answer with: 503, not 200 with no memories.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn embedder_down_and_keyword_failing_is_a_503_not_an_empty_answer(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "alpha").embedding(axis(0)).insert(&db).await;
    let token = sign_local_token(SECRET, &claims(org)).unwrap();
    // Keyword only (embedder down): still answers.
    let keyword_only = app(retriever(&db, Arc::new(integration_tests::DownEmbedder), None));
    let (status, _, body) = call(&keyword_only, &token, "/v1/retrieve", query("alpha")).await;
    assert_eq!((status, body["degraded"].as_bool()), (StatusCode::OK, Some(true)));
    // And the keyword branch failing too (a text search configuration that does not exist).
    let broken =
        retriever(&db, Arc::new(integration_tests::DownEmbedder), None).with_text_search_config("no_such_config");
    let (status, headers, _) = call(&app(broken), &token, "/v1/retrieve", query("alpha")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
}

/// A read on a request's path gives up after the read budget (here while a lock holds the table), rather than after
/// the role's lock and statement limits.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_read_by_id_gives_up_after_the_read_budget(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let m = memory(org, "a fact").insert(&db).await;
    let config = RetrievalConfig { read_budget_ms: 200, ..RetrievalConfig::default() };
    let r = Retriever::new(db.app.clone(), Arc::new(FixedEmbedder::default()), None, config);
    let mut holder = db.admin.begin().await.unwrap();
    sqlx::query("LOCK TABLE memory IN ACCESS EXCLUSIVE MODE").execute(&mut *holder).await.unwrap();
    let started = std::time::Instant::now();
    let (read, chain) = (r.memory(org, None, m.id).await, r.supersession_chain(org, None, m.id).await);
    let waited = started.elapsed();
    holder.rollback().await.unwrap();
    assert!(read.is_err() && chain.is_err());
    // The role's lock timeout is 5 s: each read gave up long before.
    assert!(waited < std::time::Duration::from_secs(3), "{waited:?}");
    assert!(r.memory(org, None, m.id).await.is_ok(), "served again once the lock is gone");
}

/// Holds every query "hold" until released.
struct GatedEmbedder(Arc<tokio::sync::Semaphore>);

#[async_trait]
impl Embedder for GatedEmbedder {
    fn dimension(&self) -> usize {
        DIM
    }
    fn model_id(&self) -> &str {
        "gated"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.iter().any(|t| t == "hold") {
            let _open = self.0.acquire().await.expect("open");
        }
        Ok(texts.iter().map(|_| axis(0)).collect())
    }
}

/// One organisation's requests beyond its share wait their turn, then get a 429 with `Retry-After` and a JSON
/// body; another organisation is served meanwhile, and the first is served again once its running request ends.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_organisation_beyond_its_share_gets_429_while_another_is_served(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let (busy, quiet) = (Uuid::now_v7(), Uuid::now_v7());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let auth = Authenticator::local(&SECRET.to_string().into(), LOCAL_ISSUER, LOCAL_AUDIENCE).unwrap();
    let mut state = AppState::new(retriever(&db, Arc::new(GatedEmbedder(gate.clone())), None), auth);
    state.fair = Arc::new(retrieve::fair::FairShare::new(2, Duration::from_millis(300)));
    let app = retrieve::app(state);
    let (busy_token, quiet_token) =
        (sign_local_token(SECRET, &claims(busy)).unwrap(), sign_local_token(SECRET, &claims(quiet)).unwrap());

    let held: Vec<_> = (0..2)
        .map(|_| {
            let (app, token) = (app.clone(), busy_token.clone());
            tokio::spawn(async move { call(&app, &token, "/v1/retrieve", query("hold")).await.0 })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let (status, headers, body) = call(&app, &busy_token, "/v1/retrieve", query("q")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited its turn first");
    assert_eq!(headers.get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(body["error"]["code"], "too_many_requests");
    let mcp = Request::post("/mcp")
        .header(header::AUTHORIZATION, format!("Bearer {busy_token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Body::from(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string()))
        .unwrap();
    assert_eq!(app.clone().oneshot(mcp).await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS, "MCP too");

    assert_eq!(call(&app, &quiet_token, "/v1/retrieve", query("q")).await.0, StatusCode::OK, "the quiet one");
    let unauthenticated = call(&app, "not-a-token", "/v1/retrieve", query("q")).await;
    assert_eq!(unauthenticated.0, StatusCode::UNAUTHORIZED, "no credentials is a 401 as before, not a turn");

    gate.add_permits(2);
    for request in held {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(call(&app, &busy_token, "/v1/retrieve", query("q")).await.0, StatusCode::OK, "its turn again");
}

/// Arbitrary bodies and tokens, and JSON of the right shape with arbitrary values, through every POST route, every
/// tool by name and over MCP, and the reads by id: the answer is a success or a 4xx with a JSON error (over MCP, a
/// JSON-RPC answer), never a 5xx. `make fuzz` runs many more cases.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn fuzz_http_bodies_and_tokens_never_answer_5xx(opts: PgPoolOptions, conn: PgConnectOptions) {
    use proptest::{prelude::*, strategy::ValueTree, test_runner::TestRunner};
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let fact = memory(org, "a fact").embedding(axis(0)).insert(&db).await;
    let app = app(retriever(&db, Arc::new(FixedEmbedder::default()), None));
    let valid = sign_local_token(SECRET, &claims(org)).unwrap();
    let cases: u32 = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    // Every tool of the catalogue, and every field any of them or the routes take.
    let listed = Request::get("/v1/tools").header(header::AUTHORIZATION, format!("Bearer {valid}")).body(Body::empty());
    let listed = app.clone().oneshot(listed.unwrap()).await.unwrap().into_body().collect().await.unwrap().to_bytes();
    let listed: Value = serde_json::from_slice(&listed).unwrap();
    let tools: Vec<String> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert!(tools.len() >= 5, "{listed}");
    let mut fields: Vec<String> =
        ["mode", "query", "max_results", "session_id", "turn", "strategy", "filters", "agent_id", "cooldown_token"]
            .map(String::from)
            .into();
    for tool in listed["tools"].as_array().unwrap() {
        fields.extend(tool["input_schema"]["properties"].as_object().into_iter().flatten().map(|(k, _)| k.clone()));
    }
    fields.sort();
    fields.dedup();
    let value = || {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,40}".prop_map(Value::from),
            Just(json!("passive")),
            Just(json!("agent_query")),
            Just(json!("hybrid")),
            Just(json!("src/lib.rs")),
            (0u32..5).prop_map(Value::from),
        ]
    };
    let shaped = prop::collection::vec((prop::sample::select(fields), value()), 0..6)
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect()).to_string());
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        shaped.clone()
    ];
    let token = prop_oneof![
        Just(valid.clone()),
        "[ -~]{0,200}", // header values are visible ASCII: nothing else reaches the service
        "[A-Za-z0-9_-]{10,40}\\.[A-Za-z0-9_-]{10,80}\\.[A-Za-z0-9_-]{0,40}"
    ];
    let mut routes: Vec<String> = ["/v1/retrieve", "/v1/search", "/v1/tools/memory.query"].map(String::from).into();
    routes.extend(tools.iter().map(|t| format!("/v1/tools/{t}")));
    routes.push("/v1/tools/no.such.tool".into());
    let route = prop::sample::select(routes);
    let mut runner = TestRunner::deterministic();
    for _ in 0..cases {
        let (body, token, route) =
            (body.clone(), token.clone(), route.clone()).new_tree(&mut runner).unwrap().current();
        let request = Request::post(&route)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.clone()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert!(!status.is_server_error(), "{route} {body:?} with {token:?}: {status} {bytes:?}");
        if status.is_client_error() {
            let error: Value = serde_json::from_slice(&bytes).unwrap();
            assert!(error["error"]["code"].is_string(), "{error}");
        }
    }
    // Every tool over MCP with arbitrary arguments: a JSON-RPC answer (a result, `isError` or an error), never a 5xx.
    let call = (prop::sample::select(tools), shaped, token.clone());
    for _ in 0..cases / 2 {
        let (tool, arguments, token) = call.new_tree(&mut runner).unwrap().current();
        let arguments: Value = serde_json::from_str(&arguments).unwrap();
        let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        let request = Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Body::from(rpc.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert!(!status.is_server_error(), "MCP {rpc} with {token:?}: {status} {bytes:?}");
        if status.is_success() {
            // A fault is an internal JSON-RPC error or an unavailable tool, both with HTTP 200: neither may happen.
            let answer: Value = serde_json::from_slice(&bytes).unwrap();
            assert!(answer["result"].is_object() || answer["error"].is_object(), "{answer}");
            assert_ne!(answer["error"]["code"], json!(-32603), "MCP {rpc}: {answer}");
            let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
            assert!(!(answer["result"]["isError"] == json!(true) && text.starts_with("unavailable")), "{answer}");
        }
    }
    // The reads by id, with arbitrary ids.
    let id = prop_oneof![Just(fact.id.to_string()), "[0-9a-f-]{1,40}", "[0-9A-Za-z._~%-]{1,60}"];
    for _ in 0..cases / 2 {
        let (id, chain) = (id.clone(), any::<bool>()).new_tree(&mut runner).unwrap().current();
        let uri = format!("/v1/memories/{id}{}", if chain { "/chain" } else { "" });
        let request = Request::get(&uri).header(header::AUTHORIZATION, format!("Bearer {valid}")).body(Body::empty());
        let response = app.clone().oneshot(request.unwrap()).await.unwrap();
        assert!(!response.status().is_server_error(), "{uri}: {}", response.status());
    }
}
