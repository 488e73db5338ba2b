//! The synthetic workload: query probes drawn from the corpus and their precomputed embeddings.

use std::collections::HashMap;

use async_trait::async_trait;
use memory_core::embed::{EmbedError, Embedder};
use memory_tools::synthetic::{Corpus, Organization};
use rand::{Rng, SeedableRng, rngs::StdRng};
use uuid::Uuid;

/// Query embeddings computed up front, so timings exclude the embedding model.
pub struct Precomputed(pub HashMap<String, Vec<f32>>);

#[async_trait]
impl Embedder for Precomputed {
    fn dimension(&self) -> usize {
        memory_tools::synthetic::DIM
    }
    fn model_id(&self) -> &str {
        "precomputed"
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.0.get(t).cloned().ok_or_else(|| EmbedError::Unavailable(t.clone()))).collect()
    }
}

pub struct Probe {
    pub organization: Uuid,
    pub agent: Uuid,
    pub project: Uuid,
    pub task: Uuid,
    pub text: String,
    pub vector: Vec<f32>,
}

pub fn probes(corpus: &Corpus, count: usize, seed: u64, only: Option<&Organization>) -> Vec<Probe> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = corpus.total();
    (0..count)
        .map(|i| {
            let org = only.unwrap_or_else(|| {
                // Tenants query in proportion to their size.
                let mut pick = rng.random_range(0..total);
                corpus
                    .organizations
                    .iter()
                    .find(|o| {
                        if pick < o.memories {
                            true
                        } else {
                            pick -= o.memories;
                            false
                        }
                    })
                    .unwrap()
            });
            let topic = rng.random_range(0..corpus.topics());
            let p = rng.random_range(0..org.projects.len());
            Probe {
                organization: org.id,
                agent: org.agents[rng.random_range(0..org.agents.len())],
                project: org.projects[p],
                task: org.tasks[p],
                text: format!("{} q{i}", corpus.query_text(topic, &mut rng)),
                vector: corpus.vector_near(topic, 0.6, &mut rng),
            }
        })
        .collect()
}
