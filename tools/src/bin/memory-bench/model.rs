//! The embedding model on its own: query latency by length, and the ingest rate it allows.

use std::{sync::Arc, time::Instant};

use memory_core::{
    domain::{MemoryType, SourceKind, TrustLevel},
    embed::{Embedder, MiniLm},
    ingest::{Admission, IngestBatch, IngestMemory, IngestProvenance, Ingestor, MAX_MEMORIES, VERSION},
};
use memory_tools::{scratch, stats::Percentiles, synthetic::Corpus};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokenizers::Tokenizer;
use uuid::Uuid;

use crate::{
    Args, ms,
    report::{EmbedReport, IngestReport, LengthBucket},
};

/// The model's tokenizer without its padding and truncation, to count a text's word pieces.
fn word_piece_counter(args: &Args) -> anyhow::Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(args.model_dir.join("tokenizer.json")).map_err(anyhow::Error::msg)?;
    tokenizer.with_padding(None).with_truncation(None).map_err(anyhow::Error::msg)?;
    Ok(tokenizer)
}

/// Length buckets of the report, in word pieces.
const BUCKETS: [(usize, usize); 4] = [(1, 8), (9, 16), (17, 32), (33, 64)];

/// Embeds 400 queries one at a time (after 20 warm-up ones): the corpus's query texts, one to four joined, so
/// lengths spread over the buckets.
pub async fn embed_latency(args: &Args, model: &MiniLm) -> anyhow::Result<EmbedReport> {
    let tokenizer = word_piece_counter(args)?;
    let corpus = Corpus::plan(1000, args.seed);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut samples: Vec<(usize, f64)> = Vec::new();
    for i in 0..420 {
        let parts = rng.random_range(1..=4);
        let text: Vec<String> =
            (0..parts).map(|_| corpus.query_text(rng.random_range(0..corpus.topics()), &mut rng)).collect();
        let text = format!("{} {i}", text.join(" "));
        let pieces = tokenizer.encode(text.as_str(), true).map_err(anyhow::Error::msg)?.len();
        let t = Instant::now();
        model.embed_one(&text).await?;
        if i >= 20 {
            samples.push((pieces, ms(t)));
        }
    }
    let within = |lo: usize, hi: usize| -> Vec<f64> {
        samples.iter().filter(|(n, _)| (lo..=hi).contains(n)).map(|(_, t)| *t).collect()
    };
    let by_length = BUCKETS
        .iter()
        .map(|&(lo, hi)| {
            let times = within(lo, hi);
            LengthBucket { word_pieces: format!("{lo}-{hi}"), queries: times.len(), ms: Percentiles::of(&times) }
        })
        .collect();
    let lengths: Vec<f64> = samples.iter().map(|(n, _)| *n as f64).collect();
    Ok(EmbedReport { up_to_32: Percentiles::of(&within(1, 32)), by_length, word_pieces: Percentiles::of(&lengths) })
}

/// Ingests one-sentence and one-paragraph memories through `Ingestor` (every session warmed up beforehand) into a
/// scratch database, in batches of the message's maximum.
pub async fn ingest_rate(args: &Args, model: Arc<MiniLm>) -> anyhow::Result<IngestReport> {
    let db = scratch::recreate("memory_bench_ingest", 4).await?;
    model.warm_up().await?;
    let tokenizer = word_piece_counter(args)?;
    let ingestor = Ingestor::new(db.admin.clone(), model);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut rate = async |name: &str, count: usize, sentences: usize| -> anyhow::Result<(f64, f64)> {
        let texts: Vec<String> =
            (0..count).map(|i| format!("{} ({name} {i})", paragraph(sentences, &mut rng))).collect();
        let pieces: usize = texts.iter().map(|t| tokenizer.encode(t.as_str(), true).map_or(0, |e| e.len())).sum();
        let organization_id = Uuid::new_v4();
        let started = Instant::now();
        for (n, chunk) in texts.chunks(MAX_MEMORIES).enumerate() {
            let batch = IngestBatch {
                job_type: None,
                version: VERSION,
                organization_id,
                batch_id: format!("bench-{name}-{n}"),
                memories: chunk.iter().map(|text| memory(text)).collect(),
            };
            let receipt = ingestor.ingest(&batch, Admission::Active).await?;
            anyhow::ensure!(receipt.created == chunk.len(), "ingest created {} of {}", receipt.created, chunk.len());
        }
        Ok((count as f64 / started.elapsed().as_secs_f64(), pieces as f64 / count as f64))
    };
    let (sentence_per_s, sentence_word_pieces) = rate("sentence", 1000, 1).await?;
    let (paragraph_per_s, paragraph_word_pieces) = rate("paragraph", 200, 6).await?;
    Ok(IngestReport { sentence_per_s, paragraph_per_s, sentence_word_pieces, paragraph_word_pieces })
}

pub fn memory(text: &str) -> IngestMemory {
    let provenance = IngestProvenance::new(SourceKind::Run, "memory-bench", TrustLevel::Unverified);
    IngestMemory::new(text, MemoryType::Semantic, provenance)
}

/// `sentences` plausible engineering sentences of 10-16 words.
pub fn paragraph(sentences: usize, rng: &mut StdRng) -> String {
    const SUBJECTS: [&str; 8] = [
        "The deploy pipeline",
        "Alice",
        "The billing service",
        "Our staging cluster",
        "The team",
        "Bob",
        "The API",
        "The nightly job",
    ];
    const VERBS: [&str; 8] = [
        "failed on",
        "switched to",
        "now depends on",
        "prefers",
        "rolled back",
        "migrated",
        "timed out on",
        "documented",
    ];
    const OBJECTS: [&str; 12] = [
        "the Postgres upgrade",
        "a new retry policy",
        "dark mode in the editor",
        "the invoice export",
        "the cache warm-up step",
        "version 2 of the schema",
        "the rate limiter",
        "the weekly report",
        "an expired TLS certificate",
        "the search index rebuild",
        "the Kafka consumer group",
        "feature flags",
    ];
    const TAILS: [&str; 8] = [
        "after the Tuesday release",
        "because of a missing index",
        "without telling the on-call engineer",
        "during the load test",
        "so the error rate dropped",
        "until the fix landed",
        "last sprint",
        "in the EU region",
    ];
    let pick = |rng: &mut StdRng, words: &[&'static str]| words[rng.random_range(0..words.len())];
    (0..sentences)
        .map(|_| {
            format!("{} {} {} {}.", pick(rng, &SUBJECTS), pick(rng, &VERBS), pick(rng, &OBJECTS), pick(rng, &TAILS))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
