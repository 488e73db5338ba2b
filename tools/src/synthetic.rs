//! A synthetic corpus shaped like a multi-tenant deployment: 1,000 organisations skewed so the largest holds
//! 10%, projects, tasks and agents, every scope and memory type, 5% restricted, a taxonomy with tags, entity
//! mentions, sentences for full-text search and 384-d embeddings drawn from clusters on the unit sphere.
//!
//! The text follows real text's shape: a few very common domain words, each topic's own words, and a long tail
//! of 40,000 pseudo-words drawn by Zipf's law (s = 1.1) in a topic-specific order, so a term's document frequency
//! ranges from a third of a tenant's memories down to one, and queries mix tail words with common ones.
//! Deterministic for a given seed. Loaded with COPY.

use chrono::{Duration, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Normal, Zipf};
use sqlx::PgPool;
use uuid::Uuid;

use memory_core::domain::{MemoryType, Scope};

/// Changes whenever the corpus a seed produces changes (so `memory-bench --reuse` does not reuse an old one).
pub const VERSION: u32 = 2;
pub const DIM: usize = 384;
pub const ORGANIZATIONS: usize = 1000;
const TOPICS: usize = 64;
const TAXONOMY: [&str; 8] =
    ["workflow", "preferences", "infrastructure", "incidents", "customers", "security", "testing", "releases"];
const ENTITIES_PER_ORG: usize = 20;

/// The domain words every topic uses, in about a quarter of a text's words.
pub const COMMON: &[&str] = &[
    "the",
    "team",
    "service",
    "should",
    "always",
    "before",
    "after",
    "deploy",
    "review",
    "customer",
    "request",
    "error",
    "database",
    "config",
    "branch",
    "release",
    "latency",
    "budget",
    "owner",
    "weekly",
    "migration",
    "cache",
    "queue",
    "retry",
    "timeout",
    "alert",
    "dashboard",
    "runbook",
    "incident",
    "rollback",
    "feature",
    "flag",
    "token",
    "access",
    "schema",
    "index",
    "backup",
    "restore",
    "cluster",
    "region",
    "cost",
    "report",
];

const TOPIC_WORDS: &[&str] = &[
    "kafka",
    "postgres",
    "redis",
    "lambda",
    "terraform",
    "kubernetes",
    "grafana",
    "sentry",
    "stripe",
    "oauth",
    "graphql",
    "webhook",
    "cron",
    "s3",
    "cloudfront",
    "dynamo",
    "elastic",
    "vault",
    "jenkins",
    "github",
    "docker",
    "nginx",
    "rabbitmq",
    "celery",
    "django",
    "react",
    "swift",
    "kotlin",
    "golang",
    "rust",
    "python",
    "typescript",
    "invoice",
    "refund",
    "checkout",
    "onboarding",
    "churn",
    "pricing",
    "contract",
    "renewal",
    "escalation",
    "sla",
    "pagerduty",
    "oncall",
    "canary",
    "bluegreen",
    "feature",
    "experiment",
    "cohort",
    "funnel",
    "retention",
    "export",
    "import",
    "sync",
    "ledger",
    "payout",
    "kyc",
    "fraud",
    "audit",
    "gdpr",
    "soc2",
    "hipaa",
    "pentest",
    "firewall",
];

/// One organisation of the corpus and what queries against it need.
#[derive(Debug, Clone)]
pub struct Organization {
    pub id: Uuid,
    pub memories: usize,
    pub projects: Vec<Uuid>,
    pub tasks: Vec<Uuid>,
    pub agents: Vec<Uuid>,
}

pub struct Corpus {
    pub organizations: Vec<Organization>,
    centers: Vec<Vec<f32>>,
    seed: u64,
}

fn unit(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
}

/// Size of the long-tail vocabulary and the Zipf exponent of its use.
const TAIL_WORDS: usize = 40_000;
const TAIL_EXPONENT: f64 = 1.1;
const SYLLABLES: [&str; 36] = [
    "ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zu", "ba", "di", "fe", "go", "hu", "ji", "ko", "la", "mo", "nu",
    "pa", "ri", "so", "tu", "va", "xe", "yo", "zi", "bre", "dra", "fli", "gro", "plo", "stra", "tri", "vel", "wen",
];

/// The long-tail word of a topic at Zipf rank `rank` (1 = most used): each topic orders the vocabulary its own way.
fn tail_word(topic: usize, rank: usize) -> String {
    let mut i = (rank * 7_919 + topic * 104_729) % TAIL_WORDS;
    let mut word = String::new();
    for _ in 0..3 {
        word.push_str(SYLLABLES[i % SYLLABLES.len()]);
        i /= SYLLABLES.len();
    }
    word.push_str(SYLLABLES[i % SYLLABLES.len()]);
    word
}

fn topic_word(topic: usize, k: usize) -> &'static str {
    TOPIC_WORDS[(topic * 7 + k * 3) % TOPIC_WORDS.len()]
}

impl Corpus {
    /// Plans `total` memories over [`ORGANIZATIONS`] organisations (largest 10%, the rest Zipf-like).
    pub fn plan(total: usize, seed: u64) -> Self {
        Self::plan_tenants(total, ORGANIZATIONS, seed)
    }

    /// Plans `total` memories over `organizations` organisations, sized as [`Corpus::plan`]'s.
    pub fn plan_tenants(total: usize, organizations: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let weights: Vec<f64> = (0..organizations).map(|i| if i == 0 { 0.0 } else { 1.0 / (i as f64 + 1.0) }).collect();
        let rest: f64 = weights.iter().sum();
        let mut sizes: Vec<usize> = weights.iter().map(|w| (w / rest * 0.9 * total as f64).floor() as usize).collect();
        sizes[0] = total - sizes.iter().sum::<usize>();
        let organizations = sizes
            .into_iter()
            .map(|memories| {
                let projects: Vec<Uuid> =
                    (0..1 + (memories / 2000).min(4)).map(|_| Uuid::from_u128(rng.random())).collect();
                Organization {
                    id: Uuid::from_u128(rng.random()),
                    memories,
                    tasks: projects.iter().map(|_| Uuid::from_u128(rng.random())).collect(),
                    projects,
                    agents: (0..3).map(|_| Uuid::from_u128(rng.random())).collect(),
                }
            })
            .collect();
        let normal = Normal::new(0.0f32, 1.0).unwrap();
        let centers = (0..TOPICS)
            .map(|_| {
                let mut c: Vec<f32> = (0..DIM).map(|_| normal.sample(&mut rng)).collect();
                unit(&mut c);
                c
            })
            .collect();
        Self { organizations, centers, seed }
    }

    pub fn total(&self) -> usize {
        self.organizations.iter().map(|o| o.memories).sum()
    }

    /// A vector near a topic's center (noise of total length about `spread`).
    pub fn vector_near(&self, topic: usize, spread: f32, rng: &mut StdRng) -> Vec<f32> {
        let normal = Normal::new(0.0f32, spread / (DIM as f32).sqrt()).unwrap();
        let mut v: Vec<f32> = self.centers[topic % TOPICS].iter().map(|c| c + normal.sample(rng)).collect();
        unit(&mut v);
        v
    }

    /// A few words of a topic, as an agent's question might use them: one or two of its tail words, one or two of
    /// its own words and a common one.
    pub fn query_text(&self, topic: usize, rng: &mut StdRng) -> String {
        let zipf = Zipf::new(TAIL_WORDS as f64, TAIL_EXPONENT).expect("valid Zipf parameters");
        let mut words: Vec<String> =
            (0..rng.random_range(1..3)).map(|_| tail_word(topic, zipf.sample(rng) as usize)).collect();
        words.extend((0..rng.random_range(1..3)).map(|_| topic_word(topic, rng.random_range(0..6)).to_string()));
        words.push(COMMON[rng.random_range(0..COMMON.len())].to_string());
        words.join(" ")
    }

    pub fn topics(&self) -> usize {
        TOPICS
    }

    /// Writes every table's rows with COPY (the caller drops and rebuilds the big indexes around it).
    pub async fn load(&self, pool: &PgPool, mut progress: impl FnMut(usize)) -> anyhow::Result<()> {
        let mut conn = pool.acquire().await?;
        // Taxonomy, agents and entities first (small).
        let mut nodes = String::new();
        let mut agents = String::new();
        let mut entities = String::new();
        for org in &self.organizations {
            for (i, name) in TAXONOMY.iter().enumerate() {
                nodes.push_str(&format!("{}\t{}\t\\N\t{name}\n", org.id, node_id(org.id, i)));
            }
            for agent in &org.agents {
                agents.push_str(&format!("{}\t{agent}\tbench\t{{org,project,task,agent_private}}\n", org.id));
            }
            for e in 0..ENTITIES_PER_ORG {
                entities.push_str(&format!("{}\t{}\tentity-{e}\tservice\n", org.id, entity_id(org.id, e)));
            }
        }
        copy(&mut conn, "COPY memory_taxonomy_node (organization_id, id, parent_id, name) FROM STDIN", nodes).await?;
        copy(&mut conn, "COPY agent_profile (organization_id, agent_id, name, memory_read_scopes) FROM STDIN", agents)
            .await?;
        copy(&mut conn, "COPY memory_entity (organization_id, id, name, entity_type) FROM STDIN", entities).await?;

        let mut rng = StdRng::seed_from_u64(self.seed + 1);
        let zipf = Zipf::new(TAIL_WORDS as f64, TAIL_EXPONENT).expect("valid Zipf parameters");
        let now = Utc::now();
        let (mut memories, mut tags, mut mentions) = (String::new(), String::new(), String::new());
        let mut written = 0;
        for org in &self.organizations {
            for _ in 0..org.memories {
                let id = Uuid::from_u128(rng.random());
                let topic = rng.random_range(0..TOPICS);
                let memory_type = MemoryType::ALL[rng.random_range(0..MemoryType::ALL.len())];
                let p = rng.random_range(0..org.projects.len());
                let (scope, project, task, agent) = match rng.random_range(0..100) {
                    0..50 => (Scope::Org, None, None, None),
                    50..75 => (Scope::Project, Some(org.projects[p]), None, None),
                    75..85 => (Scope::Task, Some(org.projects[p]), Some(org.tasks[p]), None),
                    _ => (Scope::AgentPrivate, None, None, Some(org.agents[rng.random_range(0..org.agents.len())])),
                };
                let sensitivity = if rng.random_bool(0.05) { "restricted" } else { "normal" };
                let words: Vec<String> = (0..rng.random_range(8..16))
                    .map(|_| match rng.random_range(0..100) {
                        0..25 => COMMON[rng.random_range(0..COMMON.len())].to_string(),
                        25..50 => topic_word(topic, rng.random_range(0..6)).to_string(),
                        _ => tail_word(topic, zipf.sample(&mut rng) as usize),
                    })
                    .collect();
                let content = format!("{} E{}{}.", words.join(" "), 4000 + topic, rng.random_range(0..10));
                let vector = self.vector_near(topic, 0.8, &mut rng);
                let created = now - Duration::minutes(rng.random_range(0..60 * 24 * 365));
                let opt = |u: Option<Uuid>| u.map_or("\\N".to_string(), |u| u.to_string());
                memories.push_str(&format!(
                    "{}\t{id}\t{}\t{}\t{}\t{scope}\t{memory_type}\t{sensitivity}\t{content}\t[{}]\t{:.3}\t{created}\t{created}\t{{bench}}\n",
                    org.id,
                    opt(project),
                    opt(task),
                    opt(agent),
                    vector.iter().map(|x| format!("{x:.5}")).collect::<Vec<_>>().join(","),
                    rng.random_range(0.3..1.0),
                ));
                tags.push_str(&format!("{}\t{id}\t{}\n", org.id, node_id(org.id, topic % TAXONOMY.len())));
                mentions.push_str(&format!("{}\t{}\t{id}\n", org.id, entity_id(org.id, topic % ENTITIES_PER_ORG)));
                written += 1;
                if written % 20_000 == 0 {
                    flush(&mut conn, &mut memories, &mut tags, &mut mentions).await?;
                    progress(written);
                }
            }
        }
        flush(&mut conn, &mut memories, &mut tags, &mut mentions).await?;
        progress(written);
        Ok(())
    }
}

/// The taxonomy node an organisation's topic-th root has.
pub fn node_id(org: Uuid, i: usize) -> Uuid {
    Uuid::from_u128(org.as_u128() ^ (0x1000 + i as u128))
}

fn entity_id(org: Uuid, i: usize) -> Uuid {
    Uuid::from_u128(org.as_u128() ^ (0x2000 + i as u128))
}

async fn flush(
    conn: &mut sqlx::PgConnection,
    memories: &mut String,
    tags: &mut String,
    mentions: &mut String,
) -> anyhow::Result<()> {
    copy(
        conn,
        "COPY memory (organization_id, id, project_id, project_task_id, agent_id, scope, memory_type, sensitivity, \
         content, embedding, confidence, created_at, updated_at, tags) FROM STDIN",
        std::mem::take(memories),
    )
    .await?;
    copy(conn, "COPY memory_taxonomy_tag (organization_id, memory_id, node_id) FROM STDIN", std::mem::take(tags))
        .await?;
    copy(
        conn,
        "COPY memory_entity_mention (organization_id, entity_id, memory_id) FROM STDIN",
        std::mem::take(mentions),
    )
    .await?;
    Ok(())
}

async fn copy(conn: &mut sqlx::PgConnection, statement: &str, rows: String) -> anyhow::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut sink = conn.copy_in_raw(statement).await?;
    sink.send(rows.into_bytes()).await?;
    sink.finish().await?;
    Ok(())
}
