//! The MCP endpoint with a real MCP client from the registry (PyPI `mcp`, tests/mcp/client.py) against the API
//! served on loopback: initialise, list the tools (the catalogue of GET /v1/tools, same schemas), call each, a bad
//! argument is a tool error, an unknown tool a protocol error, a missing or bad token a 401, and nothing of another
//! organisation is ever returned.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use integration_tests::{Db, agent_with_scopes, memory, minilm};
use memory_core::{domain::Scope, embed::Embedder, repository::RepositoryReader, store};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tower::ServiceExt;
use uuid::Uuid;

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_mcp_client_lists_and_calls_every_tool_within_its_organisation(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let (org, other, project) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let agent = agent_with_scopes(&db, org, Scope::ALL).await;
    let embed = |text: &str| {
        let text = text.to_string();
        async move { minilm().embed_one(&text).await.unwrap() }
    };
    let deploy = "billing-api deploys on Tuesdays through the release pipeline";
    let old = memory(org, "billing-api deploys on Mondays")
        .embedding(embed("billing-api deploys on Mondays").await)
        .insert(&db)
        .await;
    let new = memory(org, deploy).embedding(embed(deploy).await).insert(&db).await;
    let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
    store::transitions::supersede(&mut tx, org, old.id, new.id, "test").await.unwrap();
    tx.commit().await.unwrap();
    let secret = "billing-api deploys from the other organisation's secret pipeline";
    memory(other, secret).embedding(embed(secret).await).insert(&db).await;
    let repositories = std::env::temp_dir().join(format!("mcp-repos-{}", Uuid::now_v7()));
    let checkout = repositories.join(org.to_string()).join(project.to_string());
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    std::fs::write(checkout.join("src/lib.rs"), "/// Deploys billing-api.\npub fn deploy() {}\n").unwrap();
    std::fs::write(checkout.join(".env"), "BILLING_TOKEN=hunter2\n").unwrap();
    // src/lib.rs became memory (the read tools read nothing else); .env did not.
    let mut chunk = memory(org, "/// Deploys billing-api.\npub fn deploy() {}")
        .scope(Scope::Project)
        .project(project)
        .code("src/lib.rs", "deploy", 1..=2);
    chunk.new.provenance.source_kind = memory_core::domain::SourceKind::File;
    chunk.insert(&db).await;

    let retriever = integration_tests::shipped_retriever(&db, minilm()).with_repositories(
        Arc::new(RepositoryReader::new(&repositories, "HEAD", 64 * 1024)),
        memory_core::repository::exclude::Exclusions::secrets().unwrap(),
    );
    let app = integration_tests::local_app(retriever);

    // A missing or bad token: 401 before any MCP message is read.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for authorization in [None, Some("Bearer not-a-token")] {
        let mut request = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let response = app.clone().oneshot(request.body(Body::from(initialize.to_string())).unwrap()).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{authorization:?}");
    }

    let listed = app.clone().oneshot(Request::get("/v1/tools").body(Body::empty()).unwrap()).await.unwrap();
    let rest: Value =
        serde_json::from_slice(&http_body_util::BodyExt::collect(listed.into_body()).await.unwrap().to_bytes())
            .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let calls = json!([
        ["memory.query", {"query": "when does billing-api deploy"}],
        ["search_lexical", {"query": "billing-api deploys"}],
        ["search_semantic", {"query": "release schedule of billing-api"}],
        ["search", {"query": "billing-api", "strategy": "hybrid"}],
        ["get_memory", {"id": old.id}],
        ["memory_chain", {"id": old.id}],
        ["read_symbol", {"project_id": project, "path": "src/lib.rs", "symbol": "deploy"}],
        ["read_file_range", {"project_id": project, "path": "src/lib.rs", "start_line": 1, "end_line": 2}],
        ["read_file_range", {"project_id": project, "path": "src/lib.rs", "start_line": 2, "end_line": 1}],
        ["memory.query", {"question": "a property the schema does not have"}],
        ["get_memory", {"id": Uuid::now_v7()}],
        ["no_such_tool", {}],
        ["read_file_range", {"project_id": project, "path": ".env", "start_line": 1, "end_line": 1}],
    ]);
    let python = std::env::var("MEMORY_PYTHON").expect("MEMORY_PYTHON (run through make test)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/client.py");
    let token = integration_tests::local_token(org, Some(agent), None);
    let output =
        tokio::process::Command::new(python).args([script, &url, &token, &calls.to_string()]).output().await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();

    // The catalogue of GET /v1/tools, with the same schemas.
    let names: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
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
    for (mcp, rest) in out["tools"].as_array().unwrap().iter().zip(rest["tools"].as_array().unwrap()) {
        assert_eq!(mcp["input_schema"], rest["input_schema"], "{}: one schema for MCP and REST", mcp["name"]);
    }
    let results = out["calls"].as_array().unwrap();
    let ok = |i: usize| {
        let call = &results[i];
        assert_eq!(call["is_error"], false, "{call}");
        call
    };
    assert!(ok(0)["text"].as_str().unwrap().contains("Tuesdays"));
    for i in 1..=3 {
        let hits = &ok(i)["structured"]["hits"];
        assert!(hits.as_array().is_some_and(|h| !h.is_empty()), "{hits}");
    }
    assert_eq!(ok(4)["structured"]["status"], "superseded");
    assert_eq!(ok(5)["structured"]["chain"].as_array().unwrap().len(), 2);
    assert!(ok(6)["structured"]["text"].as_str().unwrap().contains("pub fn deploy()"));
    assert_eq!(ok(7)["structured"]["total_lines"], 2);
    for (i, code) in [(8, "invalid_request"), (9, "invalid_request"), (10, "not_found")] {
        let call = &results[i];
        assert_eq!(call["is_error"], true, "a tool error, not a protocol crash: {call}");
        assert!(call["text"].as_str().unwrap().starts_with(code), "{call}");
    }
    assert!(results[11]["protocol_error"].as_str().is_some(), "{}", results[11]);
    assert!(results[12]["text"].as_str().unwrap().starts_with("not_found"), "never served: {}", results[12]);
    assert!(!out.to_string().contains("hunter2"), "a secret was served");
    assert!(!out.to_string().contains("secret pipeline"), "another organisation's memory was returned");
    std::fs::remove_dir_all(repositories).unwrap();
}
