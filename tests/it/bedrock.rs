//! The Bedrock adapters against a local HTTP stub of the Converse and InvokeModel APIs.

use std::sync::{Arc, Mutex};

use axum::{Json, Router, extract::State, routing::post};
use memory_core::{
    embed::{Embedder, TitanEmbedder},
    llm::{BedrockLlm, InvocationPurpose, Llm, LlmError, LlmRequest},
};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<(String, Value)>>>;

async fn stub() -> (String, Seen) {
    let seen: Seen = Arc::default();
    async fn converse(
        State(seen): State<Seen>,
        axum::extract::Path(model): axum::extract::Path<String>,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        // A budget of one token is used up: the model stops there.
        let stop = if body["inferenceConfig"]["maxTokens"] == 1 { "max_tokens" } else { "end_turn" };
        seen.lock().unwrap().push((model, body));
        Json(json!({
            "output": { "message": { "role": "assistant", "content": [{ "text": "{\"nodes\": [\"workflow\"]}" }] } },
            "stopReason": stop,
            "usage": { "inputTokens": 10, "outputTokens": 5, "totalTokens": 15 },
            "metrics": { "latencyMs": 3 }
        }))
    }
    async fn invoke(
        State(seen): State<Seen>,
        axum::extract::Path(model): axum::extract::Path<String>,
        body: String,
    ) -> Json<Value> {
        let body: Value = serde_json::from_str(&body).unwrap();
        let dims = body["dimensions"].as_u64().unwrap() as usize;
        seen.lock().unwrap().push((model, body));
        Json(json!({ "embedding": vec![0.5f32; dims], "inputTextTokenCount": 3 }))
    }
    let app = Router::new()
        .route("/model/{model}/converse", post(converse))
        .route("/model/{model}/invoke", post(invoke))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn client(url: &str) -> aws_sdk_bedrockruntime::Client {
    use aws_sdk_bedrockruntime::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_bedrockruntime::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::for_tests())
        .endpoint_url(url)
        .build();
    aws_sdk_bedrockruntime::Client::from_conf(config)
}

#[tokio::test]
async fn converse_adapter_sends_system_prompt_and_purpose_and_returns_the_text() {
    let (url, seen) = stub().await;
    let llm = BedrockLlm::new(client(&url), "anthropic.claude-3-5-haiku-20241022-v1:0");
    let answer = llm
        .complete(LlmRequest {
            purpose: InvocationPurpose::MemoryRetrieval,
            system: "classify".into(),
            prompt: "Query: how do we rebase?".into(),
            max_tokens: 50,
        })
        .await
        .unwrap();
    assert_eq!(answer, r#"{"nodes": ["workflow"]}"#);
    let seen = seen.lock().unwrap();
    let (model, body) = &seen[0];
    assert_eq!(model, "anthropic.claude-3-5-haiku-20241022-v1:0");
    assert_eq!(body["system"][0]["text"], "classify");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"][0]["text"], "Query: how do we rebase?");
    assert_eq!(body["requestMetadata"]["invocation_purpose"], "memory_retrieval");
    assert_eq!(body["inferenceConfig"]["maxTokens"], 50);
}

#[tokio::test]
async fn converse_adapter_reports_an_unreachable_service_as_an_error() {
    let llm = BedrockLlm::new(client("http://127.0.0.1:9"), "m");
    let request =
        LlmRequest { purpose: InvocationPurpose::MemoryDedup, system: "s".into(), prompt: "p".into(), max_tokens: 5 };
    assert!(llm.complete(request).await.is_err());
}

#[tokio::test]
async fn titan_adapter_requests_the_configured_dimensions() {
    let (url, seen) = stub().await;
    let titan = TitanEmbedder::new(client(&url), "amazon.titan-embed-text-v2:0", 256);
    let vectors = titan.embed(&["hello".to_string()]).await.unwrap();
    assert_eq!(vectors[0].len(), 256);
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].1["inputText"], "hello");
    assert_eq!(seen[0].1["normalize"], true);
}

#[tokio::test]
async fn an_answer_cut_off_at_max_tokens_is_malformed_not_taken_as_whole() {
    let (url, _) = stub().await;
    let llm = BedrockLlm::new(client(&url), "anthropic.claude-3-5-haiku-20241022-v1:0");
    let request = |max_tokens| LlmRequest {
        purpose: InvocationPurpose::MemoryMerge,
        system: "merge".into(),
        prompt: "A: x B: y".into(),
        max_tokens,
    };
    let error = llm.complete(request(1)).await.unwrap_err();
    assert!(matches!(&error, LlmError::Malformed(m) if m.contains("cut off at 1 tokens")), "{error}");
    assert!(llm.complete(request(50)).await.is_ok());
}
