//! The in-process MiniLM against sentence-transformers' reference vectors, and the dimension check.

use std::sync::Arc;

use integration_tests::{Db, FixedEmbedder, minilm};
use memory_core::embed::{self, Embedder, cosine};
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

#[derive(Deserialize, Clone)]
struct Reference {
    text: String,
    embedding: Vec<f32>,
}

fn references() -> Vec<Reference> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/minilm-reference/reference.jsonl");
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn minilm_matches_sentence_transformers_on_every_reference_text() {
    let references = references();
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

#[tokio::test]
async fn a_batch_of_several_passes_comes_back_in_the_callers_order() {
    // 70 texts of mixed lengths: three passes, sorted by length inside, run side by side.
    let texts: Vec<String> = (0..70)
        .map(|i| format!("note {i}: {}", "the deploy pipeline failed again ".repeat(1 + (i * 7) % 11)))
        .collect();
    let batch = minilm().embed(&texts).await.unwrap();
    assert_eq!(batch.len(), texts.len());
    for (i, text) in texts.iter().enumerate().step_by(9) {
        let single = minilm().embed_one(text).await.unwrap();
        assert!(cosine(&single, &batch[i]) > 0.9999, "text {i} came back out of order");
    }
}

#[tokio::test]
async fn an_abandoned_embedding_returns_its_session_to_the_pool() {
    let texts: Vec<String> = (0..200).map(|i| format!("memory number {i} about the billing service")).collect();
    // The caller stops waiting (a request's embedding budget) while the passes run.
    let abandoned = tokio::time::timeout(std::time::Duration::from_millis(5), minilm().embed(&texts)).await;
    assert!(abandoned.is_err(), "the batch should take longer than 5 ms");
    // Every session serves again: more concurrent callers than sessions all get their vectors.
    let calls = (0..8).map(|i| {
        let model = minilm();
        tokio::spawn(async move { model.embed_one(&format!("after the timeout {i}")).await })
    });
    for call in calls.collect::<Vec<_>>() {
        assert_eq!(call.await.unwrap().unwrap().len(), 384);
    }
}

#[tokio::test]
async fn a_model_directory_without_its_runtime_fails_with_a_clear_error_and_poisons_nothing() {
    let dir = std::env::temp_dir().join(format!("minilm-without-runtime-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(integration_tests::model_dir().join("config.json"), dir.join("config.json")).unwrap();
    let broken = embed::MiniLm::new(&dir).unwrap();
    let error = broken.embed_one("hello").await.unwrap_err().to_string();
    // Either the runtime library (first load in this process) or the model file (runtime already loaded).
    assert!(error.contains("could not be loaded") && error.contains(&dir.display().to_string()), "{error}");
    // The real model still loads and embeds afterwards.
    let vector = minilm().embed_one("hello").await.unwrap();
    assert_eq!(vector.len(), 384);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn sessions_sharing_the_weights_all_give_the_reference_vectors() {
    let references = references();
    let model = Arc::new(embed::MiniLm::new(integration_tests::model_dir()).unwrap().with_sessions(3));
    // More concurrent callers than sessions: every session serves, each from the one packed copy.
    let calls = references.iter().cycle().take(3 * references.len()).map(|reference| {
        let (model, reference) = (model.clone(), reference.clone());
        tokio::spawn(async move { (model.embed_one(&reference.text).await.unwrap(), reference) })
    });
    for call in calls.collect::<Vec<_>>() {
        let (vector, reference) = call.await.unwrap();
        let similarity = cosine(&vector, &reference.embedding);
        assert!(similarity >= 0.999, "cosine {similarity:.5} for {:?}", reference.text);
    }
}

/// A copy of the model directory (links to its files) whose weights.json is `edit`ed.
fn model_dir_with_manifest(edit: impl FnOnce(&mut serde_json::Value)) -> std::path::PathBuf {
    let model = integration_tests::model_dir();
    let dir = std::env::temp_dir().join(format!("minilm-weights-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&model).unwrap() {
        let name = entry.unwrap().file_name();
        if name != "weights.json" {
            std::os::unix::fs::symlink(model.join(&name), dir.join(&name)).unwrap();
        }
    }
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("weights.json")).unwrap()).unwrap();
    edit(&mut manifest);
    std::fs::write(dir.join("weights.json"), manifest.to_string()).unwrap();
    dir
}

#[tokio::test]
async fn a_weights_table_that_disagrees_with_the_weights_file_is_refused_by_name() {
    // The first tensor claims four bytes more than its dims hold.
    let mut tensor = String::new();
    let dir = model_dir_with_manifest(|manifest| {
        let first = &mut manifest["tensors"][0];
        tensor = first["name"].as_str().unwrap().to_owned();
        first["length"] = serde_json::json!(first["length"].as_u64().unwrap() + 4);
    });
    let error = embed::MiniLm::new(&dir).unwrap().embed_one("hello").await.unwrap_err().to_string();
    assert!(error.contains("weights.json") && error.contains(&tensor), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();

    // A table written for another weights file.
    let dir = model_dir_with_manifest(|manifest| {
        manifest["bytes"] = serde_json::json!(manifest["bytes"].as_u64().unwrap() + 1);
    });
    let error = embed::MiniLm::new(&dir).unwrap().embed_one("hello").await.unwrap_err().to_string();
    assert!(error.contains("weights.json") && error.contains("bytes"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
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

mod dimension {
    use integration_tests::{Db, axis, memory};
    use memory_core::{embed, store};
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use uuid::Uuid;

    /// A Titan-like embedder of another dimension.
    struct Wide(usize);

    #[async_trait::async_trait]
    impl embed::Embedder for Wide {
        fn dimension(&self) -> usize {
            self.0
        }
        fn model_id(&self) -> &str {
            "wide"
        }
        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, embed::EmbedError> {
            Ok(texts.iter().map(|_| vec![0.1; self.0]).collect())
        }
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn a_new_database_takes_the_dimension_of_its_embedding_model(opts: PgPoolOptions, conn: PgConnectOptions) {
        let db = Db::new(opts, conn).await;
        assert!(embed::ensure_dimension(&Wide(1024), store::embedding_dimension(&db.app).await.unwrap()).is_err());
        assert!(store::set_embedding_dimension(&db.admin, 1024).await.unwrap());
        let dimension = store::embedding_dimension(&db.app).await.unwrap();
        assert_eq!(dimension, 1024);
        assert!(embed::ensure_dimension(&Wide(1024), dimension).is_ok());
        assert!(!store::set_embedding_dimension(&db.admin, 1024).await.unwrap(), "repeatable");
    }

    #[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
    async fn a_database_with_embedded_memories_keeps_its_dimension(opts: PgPoolOptions, conn: PgConnectOptions) {
        let db = Db::new(opts, conn).await;
        memory(Uuid::now_v7(), "an embedded memory").embedding(axis(0)).insert(&db).await;
        assert!(store::set_embedding_dimension(&db.admin, 1024).await.is_err());
        assert_eq!(store::embedding_dimension(&db.app).await.unwrap(), 384);
    }
}

#[tokio::test]
async fn the_weights_digest_names_the_model_files_once_loaded_and_changes_with_them() {
    let dir = std::env::temp_dir().join(format!("minilm-digest-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(integration_tests::model_dir()).unwrap() {
        let path = entry.unwrap().path();
        std::os::unix::fs::symlink(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let model = embed::MiniLm::new(&dir).unwrap();
    assert_eq!(model.weights_digest(), None, "not loaded yet");
    model.warm_up().await.unwrap();
    let digest = model.weights_digest().expect("loaded");
    assert_eq!(digest.len(), 64);
    assert!(digest.chars().all(|c| c.is_ascii_hexdigit()));
    minilm().warm_up().await.unwrap();
    assert_eq!(minilm().weights_digest(), Some(digest.clone()), "the same files, the same digest");

    // Another tokenizer beside the same graph: another digest.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let mut tokenizer = std::fs::read(integration_tests::model_dir().join("tokenizer.json")).unwrap();
    tokenizer.push(b'\n');
    std::fs::write(dir.join("tokenizer.json"), tokenizer).unwrap();
    let changed = embed::MiniLm::new(&dir).unwrap();
    changed.warm_up().await.unwrap();
    assert_ne!(changed.weights_digest(), Some(digest));
    std::fs::remove_dir_all(&dir).unwrap();
}
