//! The in-process MiniLM against sentence-transformers' reference vectors, and the dimension check.

use integration_tests::{Db, FixedEmbedder, minilm};
use memory_core::embed::{self, Embedder, cosine};
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

#[derive(Deserialize)]
struct Reference {
    text: String,
    embedding: Vec<f32>,
}

#[tokio::test]
async fn minilm_matches_sentence_transformers_on_every_reference_text() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/minilm-reference/reference.jsonl");
    let references: Vec<Reference> =
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(references.len() >= 10);
    let texts: Vec<String> = references.iter().map(|r| r.text.clone()).collect();
    let vectors = minilm().embed(&texts).await.unwrap();
    for (reference, vector) in references.iter().zip(&vectors) {
        assert_eq!(vector.len(), 384);
        let similarity = cosine(vector, &reference.embedding);
        assert!(similarity >= 0.999, "cosine {similarity:.5} for {:?}", reference.text);
    }
    // Batched and single embeddings agree (padding does not leak into the mean).
    let single = minilm().embed_one(&texts[0]).await.unwrap();
    assert!(cosine(&single, &vectors[0]) > 0.9999);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn an_embedder_of_another_dimension_is_refused_at_start_up(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let column = memory_core::store::embedding_dimension(&db.app).await.unwrap();
    assert_eq!(column, 384);
    assert!(embed::ensure_dimension(minilm().as_ref(), column).is_ok());
    assert!(embed::ensure_dimension(&FixedEmbedder::default(), column).is_ok());
    let titan = memory_core::embed::TitanEmbedder::new(stub_client(), "amazon.titan-embed-text-v2:0", 1024);
    let error = embed::ensure_dimension(&titan, column).unwrap_err().to_string();
    assert!(error.contains("1024") && error.contains("vector(384)"), "{error}");
}

fn stub_client() -> aws_sdk_bedrockruntime::Client {
    let config = aws_sdk_bedrockruntime::Config::builder()
        .behavior_version(aws_sdk_bedrockruntime::config::BehaviorVersion::latest())
        .region(aws_sdk_bedrockruntime::config::Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    aws_sdk_bedrockruntime::Client::from_conf(config)
}
