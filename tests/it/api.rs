//! Every endpoint through the router (no network), including the client-error paths.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use integration_tests::{Db, FixedEmbedder, agent_with_scopes, axis, memory, retriever};
use memory_core::{domain::Scope, repository::RepositoryReader, store};
use retrieve::{AppState, Authenticator, Claims, auth::sign_local_token};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tower::ServiceExt;
use uuid::Uuid;

const QUERY: &str = "probe query";

struct Api {
    app: axum::Router,
}

impl Api {
    fn new(db: &Db) -> Self {
        Self::serving(db, None)
    }

    /// With the projects' repositories under `repositories` for the repository tools.
    fn serving(db: &Db, repositories: Option<&std::path::Path>) -> Self {
        let embedder = Arc::new(FixedEmbedder::default().with(QUERY, axis(0)));
        let mut retriever = retriever(db, embedder, None);
        if let Some(root) = repositories {
            retriever = retriever.with_repositories(
                Arc::new(RepositoryReader::new(root, "HEAD", 64 * 1024)),
                memory_core::repository::exclude::Exclusions::secrets().unwrap(),
            );
        }
        Self { app: integration_tests::local_app(retriever) }
    }

    async fn call(&self, method: &str, uri: &str, token: Option<&str>, body: Option<String>) -> (StatusCode, Value) {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => builder.header(header::CONTENT_TYPE, "application/json").body(Body::from(body)).unwrap(),
            None => builder.body(Body::empty()).unwrap(),
        };
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

fn token(org: Uuid, agent: Option<Uuid>, scope: Option<&str>) -> String {
    integration_tests::local_token(org, agent, scope)
}

/// method, uri, token, body, expected status, expected error code.
type Case<'a> = (&'a str, String, Option<String>, Option<String>, StatusCode, &'a str);

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn healthz_openapi_and_tools_answer(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let api = Api::new(&db);
    assert_eq!(api.call("GET", "/healthz", None, None).await.0, StatusCode::OK);
    let (status, doc) = api.call("GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(doc["paths"]["/v1/retrieve"]["post"].is_object());
    assert!(doc["components"]["schemas"]["RetrievalResult"].is_object());
    let (_, tools) = api.call("GET", "/v1/tools", None, None).await;
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "memory.query",
            "search_lexical",
            "search_semantic",
            "search",
            "get_memory",
            "memory_chain",
            "read_symbol",
            "read_file_range"
        ]
    );
    assert!(tools["tools"][0]["input_schema"]["properties"]["query"].is_object());
    assert!(tools["tools"][6]["input_schema"]["required"].as_array().unwrap().contains(&json!("symbol")));
    assert!(doc["paths"]["/v1/tools/{name}"]["post"].is_object(), "every tool is callable by name");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn retrieve_returns_the_spec_fields_for_each_mode(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let agent = agent_with_scopes(&db, org, Scope::ALL).await;
    let m = memory(org, "probe query fact").embedding(axis(0)).insert(&db).await;
    let api = Api::new(&db);
    let t = token(org, Some(agent), None);
    let bodies = [
        json!({"mode": "passive", "query": QUERY, "session_id": "s1", "turn": 1}),
        json!({"mode": "mention", "query": format!("look up @memory:{QUERY}")}),
        json!({"mode": "agent_query", "query": QUERY, "max_results": 5}),
    ];
    for body in bodies {
        let (status, result) = api.call("POST", "/v1/retrieve", Some(&t), Some(body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{result}");
        assert_eq!(result["memories"][0]["memory"]["id"], m.id.to_string());
        assert!(result["memories"][0]["score"].is_number());
        assert!(result["memories"][0]["cosine_sim"].is_number());
        assert_eq!(result["fallback_used"], false);
        assert!(result["entity_profiles"].is_array());
        assert_eq!(result["degraded"], false);
        assert!(result["memories"][0].get("explanation").is_none(), "explained only when asked");
        assert!(result.get("trace").is_none(), "traced only when asked");
        assert_eq!(result["record"]["ranking_digest"].as_str().map(str::len), Some(16), "{result}");
        assert_eq!(result["record"]["service_version"], env!("CARGO_PKG_VERSION"));
    }
    let tool = json!({"query": QUERY});
    let (status, result) = api.call("POST", "/v1/tools/memory.query", Some(&t), Some(tool.to_string())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["memories"][0]["memory"]["id"], m.id.to_string());

    // Asked to explain: each memory's ranking features by name (the learned model's contributions only when it
    // ranks).
    let asked = [
        ("/v1/retrieve", json!({"mode": "agent_query", "query": QUERY, "explain": true})),
        ("/v1/tools/memory.query", json!({"query": QUERY, "explain": true})),
    ];
    for (route, body) in asked {
        let (status, result) = api.call("POST", route, Some(&t), Some(body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{result}");
        let explanation = &result["memories"][0]["explanation"];
        let features = explanation["features"].as_object().expect("features");
        let names: Vec<&str> = features.keys().map(String::as_str).collect();
        let mut expected = memory_core::retrieval::learned::NAMES.to_vec();
        expected.sort();
        assert_eq!(names, expected, "{route}");
        assert_eq!(features["cosine_of_the_nearest"], 1.0, "{route}: the nearest neighbour itself");
        assert!(explanation.get("contributions").is_none(), "{route}: the relevance formula ranked");
        assert_eq!(explanation["vector"]["rank"], 1, "{route}");
        assert_eq!(result["trace"]["candidates"]["fused"], 1, "{route}");
        assert!(result["trace"]["blend"]["kind"].is_string(), "{route}");
    }

    // Search, asked to explain: each hit's branches.
    let body = json!({"query": QUERY, "strategy": "hybrid", "explain": true});
    let (status, result) = api.call("POST", "/v1/search", Some(&t), Some(body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    let explanation = &result["hits"][0]["explanation"];
    assert_eq!((explanation["vector"]["rank"].clone(), explanation["fused_rank"].clone()), (json!(1), json!(1)));
    let body = json!({"query": QUERY, "strategy": "hybrid"});
    let (_, result) = api.call("POST", "/v1/search", Some(&t), Some(body.to_string())).await;
    assert!(result["hits"][0].get("explanation").is_none());

    // As of a past time: what was active then; before the memory was written, nothing.
    let (now, before) = (chrono::Utc::now().to_rfc3339(), m.created_at - chrono::Duration::seconds(1));
    for (as_of, expected) in [(now, 1), (before.to_rfc3339(), 0)] {
        let body = json!({"mode": "agent_query", "query": QUERY, "as_of": as_of});
        let (status, result) = api.call("POST", "/v1/retrieve", Some(&t), Some(body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{result}");
        assert_eq!(result["memories"].as_array().unwrap().len(), expected, "as of {as_of}");
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn search_memory_and_chain_endpoints_answer(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let old = memory(org, "probe query old").embedding(axis(0)).insert(&db).await;
    let new = memory(org, "probe query new").embedding(axis(0)).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::transitions::supersede(&mut tx, org, old.id, new.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let api = Api::new(&db);
    let t = token(org, None, None);

    let body = json!({"query": QUERY, "strategy": "hybrid", "filters": {"min_confidence": 0.1}});
    let (status, result) = api.call("POST", "/v1/search", Some(&t), Some(body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["hits"].as_array().unwrap().len(), 1);
    assert_eq!(result["hits"][0]["match"], "hybrid");

    let (status, fetched) = api.call("GET", &format!("/v1/memories/{}", old.id), Some(&t), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fetched["status"], "superseded");
    let (status, chain) = api.call("GET", &format!("/v1/memories/{}/chain", old.id), Some(&t), None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = chain["chain"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![old.id.to_string(), new.id.to_string()]);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn client_mistakes_get_4xx_json_errors(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let other_org_memory = memory(Uuid::now_v7(), "theirs").embedding(axis(0)).insert(&db).await;
    let api = Api::new(&db);
    let t = token(org, None, None);
    let ok = json!({"mode": "agent_query", "query": QUERY}).to_string();

    let cases: Vec<Case> = vec![
        ("POST", "/v1/retrieve".into(), None, Some(ok.clone()), StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            "POST",
            "/v1/retrieve".into(),
            Some("not-a-jwt".into()),
            Some(ok.clone()),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(sign_local_token("wrong", &Claims { org_id: org.to_string(), ..Default::default() }).unwrap()),
            Some(ok.clone()),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "organization_id": Uuid::now_v7()}).to_string()),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "agent_id": Uuid::now_v7()}).to_string()),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some("{not json".into()),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "telepathy", "query": QUERY}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "max_results": 0}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "max_results": 101}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": "x".repeat(9000)}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "passive", "query": QUERY}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "cooldown_token": "from a passive answer"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "passive", "query": QUERY, "session_id": "s", "turn": 1, "as_of": "2026-01-01T00:00:00Z"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "as_of": "last tuesday"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "as_of": "2999-01-01T00:00:00Z"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": QUERY, "max_chars": 2000, "max_tokens": 500}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/retrieve".into(),
            Some(t.clone()),
            Some(json!({"mode": "agent_query", "query": "y".repeat(70_000)}).to_string()),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            "POST",
            "/v1/search".into(),
            Some(t.clone()),
            Some(json!({"query": QUERY, "strategy": "psychic"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/search".into(),
            Some(t.clone()),
            Some(json!({"query": QUERY, "vector_weight": 2.0}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        ("GET", "/v1/memories/not-a-uuid".into(), Some(t.clone()), None, StatusCode::BAD_REQUEST, "invalid_uuid"),
        (
            "GET",
            format!("/v1/memories/{}", other_org_memory.id),
            Some(t.clone()),
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "GET",
            format!("/v1/memories/{}/chain", Uuid::now_v7()),
            Some(t.clone()),
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        ("GET", "/v2/nothing".into(), Some(t.clone()), None, StatusCode::NOT_FOUND, "not_found"),
    ];
    for (method, uri, token, body, expected, code) in cases {
        let (status, response) = api.call(method, &uri, token.as_deref(), body).await;
        assert_eq!(status, expected, "{method} {uri}: {response}");
        assert_eq!(error_code(&response), code, "{method} {uri}: {response}");
        assert!(response["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_service_token_may_name_an_agent_only_with_the_any_agent_scope(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let agent = agent_with_scopes(&db, org, Scope::ALL).await;
    let private =
        memory(org, "probe query private").embedding(axis(0)).scope(Scope::AgentPrivate).agent(agent).insert(&db).await;
    let api = Api::new(&db);
    let body = json!({"mode": "agent_query", "query": QUERY, "agent_id": agent}).to_string();

    let (status, _) = api.call("POST", "/v1/retrieve", Some(&token(org, None, None)), Some(body.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let service = token(org, None, Some("memory:read memory:any_agent"));
    let (status, result) = api.call("POST", "/v1/retrieve", Some(&service), Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["memories"][0]["memory"]["id"], private.id.to_string());
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn behind_api_gateway_the_principal_comes_from_the_jwt_authorizer_claims(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org: Uuid = "0a000000-0000-4000-8000-000000000001".parse().unwrap();
    let text = "Deploy billing-api with the release pipeline";
    let v = memory_core::embed::Embedder::embed_one(integration_tests::minilm().as_ref(), text).await.unwrap();
    let m = memory(org, text).embedding(v).insert(&db).await;
    memory(Uuid::now_v7(), text).embedding(axis(0)).insert(&db).await;
    let app = integration_tests::sample_event_app(retriever(&db, integration_tests::minilm(), None));
    let event =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../events/apigw-v2-retrieve-agent-query.json"))
            .unwrap();

    let request = lambda_http::request::from_str(&event).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let ids: Vec<&str> =
        body["memories"].as_array().unwrap().iter().map(|m| m["memory"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![m.id.to_string()]);

    let mut unauthorised: Value = serde_json::from_str(&event).unwrap();
    unauthorised["requestContext"].as_object_mut().unwrap().remove("authorizer");
    let request = lambda_http::request::from_str(&unauthorised.to_string()).unwrap();
    assert_eq!(app.clone().oneshot(request).await.unwrap().status(), StatusCode::UNAUTHORIZED);

    // An event forged with another API's id (a direct invoke, another API) is refused.
    let mut forged: Value = serde_json::from_str(&event).unwrap();
    forged["requestContext"]["apiId"] = "attacker".into();
    let request = lambda_http::request::from_str(&forged.to_string()).unwrap();
    assert_eq!(app.clone().oneshot(request).await.unwrap().status(), StatusCode::UNAUTHORIZED);

    // With an issuer and audience configured, the claims must carry them.
    let strict = retrieve::app(AppState::new(
        retriever(&db, integration_tests::minilm(), None),
        Authenticator::ApiGateway {
            api_id: Some("abc123".into()),
            stage: Some("$default".into()),
            issuer: Some("https://auth.example.com/".into()),
            audiences: vec!["agent-memory".into()],
            keys: None,
        },
    ));
    let request = lambda_http::request::from_str(&event).unwrap();
    assert_eq!(strict.clone().oneshot(request).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let mut issued: Value = serde_json::from_str(&event).unwrap();
    let claims = &mut issued["requestContext"]["authorizer"]["jwt"]["claims"];
    claims["iss"] = "https://auth.example.com/".into();
    claims["aud"] = "[agent-memory other]".into();
    let request = lambda_http::request::from_str(&issued.to_string()).unwrap();
    assert_eq!(strict.oneshot(request).await.unwrap().status(), StatusCode::OK);
}

/// The body of a response validated against the schema the OpenAPI document declares for its route and status.
fn conforms(doc: &Value, route: &str, method: &str, status: StatusCode, body: &Value) -> Result<(), String> {
    let declared = &doc["paths"][route][method.to_lowercase()]["responses"][status.as_str()];
    let schema = declared["content"]["application/json"]["schema"].clone();
    if schema.is_null() {
        return Err(format!("{method} {route} answered {status}, which the document does not declare with a body"));
    }
    // The components travel with the schema, so its `#/components/schemas/...` references resolve.
    let mut schema = schema;
    schema["components"] = doc["components"].clone();
    let validator = jsonschema::validator_for(&schema).map_err(|e| format!("{method} {route}: bad schema: {e}"))?;
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    if errors.is_empty() { Ok(()) } else { Err(format!("{method} {route} {status}: {errors:?}\n{body}")) }
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn every_route_answers_as_the_openapi_document_declares(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    let agent = agent_with_scopes(&db, org, Scope::ALL).await;
    let old = memory(org, "probe query old").embedding(axis(0)).insert(&db).await;
    let new = memory(org, "probe query new").embedding(axis(0)).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::transitions::supersede(&mut tx, org, old.id, new.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let project = Uuid::now_v7();
    let repositories = std::env::temp_dir().join(format!("api-repos-{}", Uuid::now_v7()));
    std::fs::create_dir_all(repositories.join(org.to_string()).join(project.to_string()).join("src")).unwrap();
    let lib = "/// Reads the configuration.\npub fn parse_config() {}\n";
    std::fs::write(repositories.join(org.to_string()).join(project.to_string()).join("src/lib.rs"), lib).unwrap();
    // The file became memory (the read tools read nothing else).
    let mut chunk = memory(org, lib).scope(Scope::Project).project(project).code("src/lib.rs", "parse_config", 1..=2);
    chunk.new.provenance.source_kind = memory_core::domain::SourceKind::File;
    chunk.insert(&db).await;
    let api = Api::serving(&db, Some(&repositories));
    let (_, doc) = api.call("GET", "/openapi.json", None, None).await;
    let t = Some(token(org, Some(agent), None));
    let other_org = Some(token(Uuid::now_v7(), None, None));
    let operator = Some(token(org, None, Some("memory:operator")));
    let other_operator = Some(token(Uuid::now_v7(), None, Some("memory:operator")));
    let deployment = Some(token(org, None, Some("memory:deployment")));
    let reviewer = Some(token(org, Some(agent_with_scopes(&db, org, &[Scope::Org]).await), None));
    let symbol = json!({"project_id": project, "path": "src/lib.rs", "symbol": "parse_config"});
    let no_symbol = json!({"project_id": project, "path": "src/lib.rs", "symbol": "nothing"});
    let range = json!({"project_id": project, "path": "src/lib.rs", "start_line": 1, "end_line": 2});
    let backwards = json!({"project_id": project, "path": "src/lib.rs", "start_line": 2, "end_line": 1});
    let post = |uri: &str, token: &Option<String>, body: Value, status, code| -> Case {
        ("POST", uri.into(), token.clone(), Some(body.to_string()), status, code)
    };
    let get =
        |uri: String, token: &Option<String>, status, code| -> Case { ("GET", uri, token.clone(), None, status, code) };
    let (old_uri, new_uri) = (format!("/v1/memories/{}", old.id), format!("/v1/memories/{}", new.id));
    let agent_query = json!({"mode": "agent_query", "query": QUERY});
    let passive = json!({"mode": "passive", "query": QUERY, "session_id": "s", "turn": 1});
    let elsewhere = json!({"mode": "agent_query", "query": QUERY, "organization_id": Uuid::now_v7()});
    let too_large = json!({"mode": "agent_query", "query": "x".repeat(70 * 1024)});
    let unpaired = json!({"mode": "passive", "query": QUERY});
    let malformed =
        ("POST", "/v1/retrieve".into(), t.clone(), Some("{".into()), StatusCode::BAD_REQUEST, "malformed_json");
    let cases: Vec<(&str, Case)> = vec![
        ("/healthz", get("/healthz".into(), &None, StatusCode::OK, "")),
        ("/v1/tools", get("/v1/tools".into(), &None, StatusCode::OK, "")),
        ("/v1/memories/{id}/profiles", get(format!("{new_uri}/profiles"), &t, StatusCode::OK, "")),
        (
            "/v1/memories/{id}/profiles",
            get(format!("/v1/memories/{}/profiles", Uuid::now_v7()), &t, StatusCode::NOT_FOUND, "not_found"),
        ),
        ("/v1/review", get("/v1/review".into(), &operator, StatusCode::OK, "")),
        ("/v1/review", get("/v1/review".into(), &other_operator, StatusCode::OK, "")),
        ("/v1/review", get("/v1/review".into(), &t, StatusCode::FORBIDDEN, "forbidden")),
        ("/v1/review", get("/v1/review".into(), &None, StatusCode::UNAUTHORIZED, "unauthorized")),
        ("/v1/queues", get("/v1/queues".into(), &deployment, StatusCode::OK, "")),
        ("/v1/queues", get("/v1/queues".into(), &operator, StatusCode::FORBIDDEN, "forbidden")),
        ("/v1/queues", get("/v1/queues".into(), &None, StatusCode::UNAUTHORIZED, "unauthorized")),
        ("/v1/retrieve", post("/v1/retrieve", &t, passive, StatusCode::OK, "")),
        ("/v1/retrieve", post("/v1/retrieve", &t, agent_query.clone(), StatusCode::OK, "")),
        ("/v1/retrieve", malformed),
        ("/v1/retrieve", post("/v1/retrieve", &None, agent_query, StatusCode::UNAUTHORIZED, "unauthorized")),
        ("/v1/retrieve", post("/v1/retrieve", &t, elsewhere, StatusCode::FORBIDDEN, "forbidden")),
        ("/v1/retrieve", post("/v1/retrieve", &t, too_large, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")),
        ("/v1/retrieve", post("/v1/retrieve", &t, unpaired, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request")),
        ("/v1/tools/memory.query", post("/v1/tools/memory.query", &t, json!({"query": QUERY}), StatusCode::OK, "")),
        (
            "/v1/tools/memory.query",
            post(
                "/v1/tools/memory.query",
                &t,
                json!({"query": ""}),
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
            ),
        ),
        ("/v1/search", post("/v1/search", &t, json!({"query": QUERY, "strategy": "hybrid"}), StatusCode::OK, "")),
        ("/v1/search", post("/v1/search", &t, json!({"query": QUERY, "strategy": "graph"}), StatusCode::OK, "")),
        (
            "/v1/search",
            post(
                "/v1/search",
                &other_org,
                json!({"query": QUERY, "organization_id": org}),
                StatusCode::FORBIDDEN,
                "forbidden",
            ),
        ),
        (
            "/v1/tools/search_lexical",
            post("/v1/tools/search_lexical", &t, json!({"query": QUERY, "language": "rust"}), StatusCode::OK, ""),
        ),
        (
            "/v1/tools/search_lexical",
            post(
                "/v1/tools/search_lexical",
                &t,
                json!({"query": QUERY, "language": "cobol"}),
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
            ),
        ),
        (
            "/v1/tools/search_semantic",
            post("/v1/tools/search_semantic", &t, json!({"query": QUERY, "path_prefix": "src/"}), StatusCode::OK, ""),
        ),
        ("/v1/tools/read_symbol", post("/v1/tools/read_symbol", &t, symbol.clone(), StatusCode::OK, "")),
        ("/v1/tools/read_symbol", post("/v1/tools/read_symbol", &t, no_symbol, StatusCode::NOT_FOUND, "not_found")),
        (
            "/v1/tools/read_symbol",
            post("/v1/tools/read_symbol", &reviewer, symbol.clone(), StatusCode::FORBIDDEN, "forbidden"),
        ),
        (
            "/v1/tools/read_symbol",
            post("/v1/tools/read_symbol", &other_org, symbol, StatusCode::NOT_FOUND, "not_found"),
        ),
        ("/v1/tools/read_file_range", post("/v1/tools/read_file_range", &t, range, StatusCode::OK, "")),
        (
            "/v1/tools/read_file_range",
            post("/v1/tools/read_file_range", &t, backwards, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
        ),
        ("/v1/tools/{name}", post("/v1/tools/get_memory", &t, json!({"id": old.id}), StatusCode::OK, "")),
        ("/v1/tools/{name}", post("/v1/tools/memory_chain", &t, json!({"id": new.id}), StatusCode::OK, "")),
        ("/v1/tools/{name}", post("/v1/tools/nothing", &t, json!({}), StatusCode::NOT_FOUND, "not_found")),
        (
            "/v1/tools/{name}",
            post(
                "/v1/tools/get_memory",
                &t,
                json!({"uuid": old.id}),
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
            ),
        ),
        ("/v1/memories/{id}", get(old_uri.clone(), &t, StatusCode::OK, "")),
        ("/v1/memories/{id}", get(format!("/v1/memories/{}", Uuid::now_v7()), &t, StatusCode::NOT_FOUND, "not_found")),
        ("/v1/memories/{id}", get("/v1/memories/not-a-uuid".into(), &t, StatusCode::BAD_REQUEST, "invalid_uuid")),
        ("/v1/memories/{id}/chain", get(format!("{old_uri}/chain"), &t, StatusCode::OK, "")),
        ("/v1/memories/{id}/chain", get(format!("{new_uri}/chain"), &other_org, StatusCode::NOT_FOUND, "not_found")),
    ];
    let mut answered_ok = std::collections::BTreeSet::new();
    for (route, (method, uri, token, body, expected, code)) in cases {
        let (status, answer) = api.call(method, &uri, token.as_deref(), body).await;
        assert_eq!(status, expected, "{method} {uri}: {answer}");
        assert_eq!(error_code(&answer), code, "{method} {uri}: {answer}");
        conforms(&doc, route, method, status, &answer).unwrap();
        if status == StatusCode::OK {
            answered_ok.insert((route, method.to_lowercase()));
        }
    }
    // Every documented operation was called and answered as documented.
    for (route, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            assert!(answered_ok.contains(&(route.as_str(), method.clone())), "{method} {route} was not exercised");
        }
    }
    std::fs::remove_dir_all(repositories).unwrap();
}

/// RFC 8032's first Ed25519 test key as PKCS#8 (`flip` changes its last seed byte: another key), and the public key
/// of the unflipped one.
fn ed25519_key(flip: bool) -> (Vec<u8>, Vec<u8>) {
    let hex =
        |h: &str| (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
    let mut pkcs8 = hex("302e020100300506032b657004220420");
    pkcs8.extend(hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
    if flip {
        *pkcs8.last_mut().unwrap() ^= 1;
    }
    (pkcs8, hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
}

/// The JWK of an Ed25519 public key.
fn ed25519_jwk(kid: &str, public: &[u8]) -> Value {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "x": URL_SAFE_NO_PAD.encode(public)})
}

/// The public key of a PKCS#8 Ed25519 key.
fn public_of(pkcs8: &[u8]) -> Vec<u8> {
    let seed: [u8; 32] = pkcs8[pkcs8.len() - 32..].try_into().unwrap();
    ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key().to_bytes().to_vec()
}

const ISSUER: &str = "https://auth.example.com/";

/// The retrieve app behind API Gateway, verifying tokens with `keys`, and a request of `token` whose event claims
/// `claimed_org` (what a direct invocation could forge).
fn keyed_app(db: &Db, keys: retrieve::JwksVerifier) -> axum::Router {
    retrieve::app(AppState::new(
        retriever(db, Arc::new(FixedEmbedder::default().with(QUERY, axis(0))), None),
        Authenticator::ApiGateway {
            api_id: Some("abc123".into()),
            stage: Some("$default".into()),
            issuer: Some(ISSUER.into()),
            audiences: vec!["agent-memory".into(), "second-api".into()],
            keys: Some(Box::new(keys)),
        },
    ))
}

fn gateway_request(token: &str, claimed_org: Uuid) -> lambda_http::Request {
    let event =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../events/apigw-v2-retrieve-agent-query.json"))
            .unwrap();
    let mut e: Value = serde_json::from_str(&event).unwrap();
    e["headers"]["authorization"] = format!("Bearer {token}").into();
    let c = &mut e["requestContext"]["authorizer"]["jwt"]["claims"];
    c["org_id"] = claimed_org.to_string().into();
    c["iss"] = ISSUER.into();
    c["aud"] = "agent-memory".into();
    e["body"] = json!({"mode": "agent_query", "query": QUERY}).to_string().into();
    lambda_http::request::from_str(&e.to_string()).unwrap()
}

fn signed(kid: &str, claims: &Value, pkcs8: &[u8]) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_der(pkcs8)).unwrap()
}

fn claims_for(org: Uuid) -> Value {
    json!({"org_id": org, "iss": ISSUER, "aud": ["agent-memory"], "exp": chrono::Utc::now().timestamp() + 600})
}

/// With the issuer's public keys configured, the function verifies the token itself: an event whose authorizer
/// claims were forged (a direct invoke with a copied API id) is refused, and so is a token signed by another key,
/// with a shared-secret algorithm keyed by the public key, expired, not yet valid, or for another audience; any
/// configured audience and any key of the set is accepted.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn with_the_issuers_keys_the_token_is_verified_and_forged_claims_are_refused(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let db = Db::new(opts, conn).await;
    let org: Uuid = "0a000000-0000-4000-8000-000000000001".parse().unwrap();
    memory(org, "Deploy billing-api with the release pipeline").embedding(axis(0)).insert(&db).await;
    let (first, public) = ed25519_key(false);
    let (second, _) = ed25519_key(true);
    // A throwaway RSA key made for these tests, and its public half as a PEM and as a JWK.
    let fixture = |name: &str| std::fs::read(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let rsa_jwk: Value = serde_json::from_slice(&fixture("issuer-rsa.jwk.json")).unwrap();
    let jwks = json!({"keys": [ed25519_jwk("k1", &public), ed25519_jwk("k2", &public_of(&second)), rsa_jwk]});
    let keys =
        retrieve::JwksVerifier::new(&jwks.to_string(), ISSUER, &["agent-memory".into(), "second-api".into()]).unwrap();
    let app = keyed_app(&db, keys);
    let status =
        async |token: &str, claimed: Uuid| app.clone().oneshot(gateway_request(token, claimed)).await.unwrap().status();
    let genuine = signed("k1", &claims_for(org), &first);
    assert_eq!(status(&genuine, org).await, StatusCode::OK);
    assert_eq!(status(&signed("k2", &claims_for(org), &second), org).await, StatusCode::OK, "any key of the set");
    let mut second_audience = claims_for(org);
    second_audience["aud"] = json!("second-api");
    assert_eq!(status(&signed("k1", &second_audience, &first), org).await, StatusCode::OK, "any audience configured");

    // The event claims another organisation, the token says ours: the token wins.
    let victim = Uuid::now_v7();
    memory(victim, "the victim's secret").embedding(axis(0)).insert(&db).await;
    let response = app.clone().oneshot(gateway_request(&genuine, victim)).await.unwrap();
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(!body.to_string().contains("the victim's secret"), "{body}");
    // Forged claims with no token, or with a token of another key, are refused.
    let (mut other, _) = ed25519_key(false);
    let n = other.len();
    other[n - 2] ^= 1;
    assert_eq!(status(&signed("k1", &claims_for(victim), &other), victim).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status("not-a-token", victim).await, StatusCode::UNAUTHORIZED);
    let mut rs256 = Header::new(Algorithm::RS256);
    rs256.kid = Some("rsa-1".into());
    let rsa = EncodingKey::from_rsa_der(&fixture("issuer-rsa.der"));
    let by_rsa = jsonwebtoken::encode(&rs256, &claims_for(org), &rsa).unwrap();
    assert_eq!(status(&by_rsa, org).await, StatusCode::OK, "an RS256 key of the set");
    // Algorithm confusion: HS256 keyed by a published public key (the RSA key's PEM and JWK, the Ed25519 key's).
    for (kid, secret) in [
        ("rsa-1", fixture("issuer-rsa.pub.pem")),
        ("rsa-1", fixture("issuer-rsa.jwk.json")),
        ("k1", ed25519_jwk("k1", &public).to_string().into_bytes()),
        ("k1", public.clone()),
    ] {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.into());
        let confused =
            jsonwebtoken::encode(&header, &claims_for(org), &EncodingKey::from_secret(&secret).unwrap()).unwrap();
        assert_eq!(status(&confused, org).await, StatusCode::UNAUTHORIZED, "HS256 keyed by {kid}'s public key");
    }
    let now = chrono::Utc::now().timestamp();
    let mut expired = claims_for(org);
    expired["exp"] = json!(now - 600);
    let mut early = claims_for(org);
    early["nbf"] = json!(now + 600);
    let mut elsewhere = claims_for(org);
    elsewhere["aud"] = json!("another-service");
    let mut no_expiry = claims_for(org);
    no_expiry.as_object_mut().unwrap().remove("exp");
    for (what, claims) in
        [("expired", expired), ("not yet valid", early), ("another audience", elsewhere), ("no exp", no_expiry)]
    {
        assert_eq!(status(&signed("k1", &claims, &first), org).await, StatusCode::UNAUTHORIZED, "{what}");
    }
}

/// The keys fetched from the issuer's JWKS URL (a local server): a rotation (the issuer publishes a new key and
/// drops the old one) is picked up on the first token of the new key, tokens of the dropped key are refused after
/// it, and tokens naming unknown keys fetch the set at most once per refresh floor.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn keys_fetched_from_the_issuers_url_follow_its_rotation(opts: PgPoolOptions, conn: PgConnectOptions) {
    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    };
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "Deploy billing-api with the release pipeline").embedding(axis(0)).insert(&db).await;
    let (first, public) = ed25519_key(false);
    let (second, _) = ed25519_key(true);
    let published = Arc::new(Mutex::new(json!({"keys": [ed25519_jwk("k1", &public)]})));
    let fetches = Arc::new(AtomicUsize::new(0));
    let server = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get({
            let (published, fetches) = (published.clone(), fetches.clone());
            move || async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                axum::Json(published.lock().unwrap().clone())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server).await.unwrap() });
    let floor = std::time::Duration::from_millis(300);
    let keys =
        retrieve::JwksVerifier::from_url(&url, ISSUER, &["agent-memory".into()]).unwrap().with_refresh_floor(floor);
    let app = keyed_app(&db, keys);
    let status = async |token: &str| app.clone().oneshot(gateway_request(token, org)).await.unwrap().status();

    assert_eq!(status(&signed("k1", &claims_for(org), &first)).await, StatusCode::OK);
    assert_eq!(status(&signed("k1", &claims_for(org), &first)).await, StatusCode::OK);
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched once, then cached");

    // Unknown keys within the floor: one fetch at most.
    tokio::time::sleep(floor).await;
    for _ in 0..5 {
        assert_eq!(status(&signed("k9", &claims_for(org), &second)).await, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "an unknown key fetches again, once per floor");

    // The issuer rotates: k2 published, k1 dropped.
    *published.lock().unwrap() = json!({"keys": [ed25519_jwk("k2", &public_of(&second))]});
    tokio::time::sleep(floor).await;
    assert_eq!(status(&signed("k2", &claims_for(org), &second)).await, StatusCode::OK, "the new key, fetched");
    tokio::time::sleep(floor).await;
    assert_eq!(status(&signed("k1", &claims_for(org), &first)).await, StatusCode::UNAUTHORIZED, "the dropped key");
}

/// Behind API Gateway the function verifies tokens itself: it does not start without the issuer's keys unless told
/// that nothing but API Gateway can invoke it, nor with keys but no issuer, nor with both a key URL and keys.
#[test]
fn behind_api_gateway_the_function_does_not_start_without_the_issuers_keys() {
    let start = |vars: &[(&str, &str)]| {
        let vars: std::collections::HashMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        retrieve::authenticator_from(|name| vars.get(name).cloned()).map(|_| ()).map_err(|e| e.to_string())
    };
    let gateway = ("MEMORY_AUTH", "api-gateway");
    let url = ("MEMORY_JWT_JWKS_URL", "https://auth.example.com/.well-known/jwks.json");
    let (issuer, audience) = (("MEMORY_JWT_ISSUER", ISSUER), ("MEMORY_JWT_AUDIENCE", "agent-memory,second-api"));
    let refused = start(&[gateway]).unwrap_err();
    assert!(refused.contains("MEMORY_TRUST_AUTHORIZER"), "{refused}");
    assert!(start(&[gateway, ("MEMORY_TRUST_AUTHORIZER", "yes")]).is_err(), "true or false only");
    assert!(start(&[gateway, url, audience]).is_err(), "keys need the issuer");
    assert!(start(&[gateway, url, ("MEMORY_JWT_JWKS", "{\"keys\": []}"), issuer, audience]).is_err(), "one of the two");
    assert_eq!(start(&[gateway, url, issuer, audience]), Ok(()));
    assert_eq!(start(&[gateway, ("MEMORY_TRUST_AUTHORIZER", "true")]), Ok(()), "said explicitly");
}
