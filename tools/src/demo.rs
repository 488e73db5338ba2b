//! The demo corpus: two organisations with projects, agents, every scope, a taxonomy, entities and restricted
//! memories, embedded with MiniLM. Deterministic (fixed seed), so README examples always find the same things.

use std::{path::Path, sync::Arc};

use chrono::{Duration, Utc};
use memory_core::{
    domain::{MemoryType, Scope, Sensitivity, SourceKind, TrustLevel},
    embed::MiniLm,
    ingest::{Admission, EntityRef, IngestBatch, IngestMemory, IngestProvenance, Ingestor, MAX_MEMORIES, VERSION},
    jobs::JobType,
    store,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use sqlx::PgPool;
use uuid::{Uuid, uuid};

pub const ACME: Uuid = uuid!("0a000000-0000-4000-8000-000000000001");
pub const GLOBEX: Uuid = uuid!("0b000000-0000-4000-8000-000000000002");
/// Per organisation: a coding agent reading every scope and a reviewer reading only `org`.
pub const CODER: [Uuid; 2] =
    [uuid!("a1000000-0000-4000-8000-000000000001"), uuid!("b1000000-0000-4000-8000-000000000001")];
pub const REVIEWER: [Uuid; 2] =
    [uuid!("a1000000-0000-4000-8000-000000000002"), uuid!("b1000000-0000-4000-8000-000000000002")];
pub const PROJECT: [Uuid; 2] =
    [uuid!("1a000000-0000-4000-8000-000000000001"), uuid!("1b000000-0000-4000-8000-000000000001")];
pub const TASK: [Uuid; 2] =
    [uuid!("7a000000-0000-4000-8000-000000000001"), uuid!("7b000000-0000-4000-8000-000000000001")];

const SERVICES: [&str; 7] = [
    "billing-api",
    "auth-service",
    "search-indexer",
    "notification-worker",
    "web-frontend",
    "data-pipeline",
    "mobile-gateway",
];

/// (taxonomy path, memory type, template); `{s}` is replaced by a service name.
const TEMPLATES: &[(&str, MemoryType, &str)] = &[
    (
        "workflow/git",
        MemoryType::Procedural,
        "Rebase {s} feature branches on main before opening a pull request; never merge main into a feature branch.",
    ),
    (
        "workflow/git",
        MemoryType::Procedural,
        "Commits to {s} use conventional commit prefixes such as feat:, fix: and chore:.",
    ),
    (
        "workflow/git",
        MemoryType::Semantic,
        "The {s} repository protects main: force pushes are rejected and two approvals are required.",
    ),
    (
        "workflow/ci",
        MemoryType::Procedural,
        "The {s} CI pipeline runs unit tests, then integration tests against a disposable PostgreSQL.",
    ),
    (
        "workflow/ci",
        MemoryType::Episodic,
        "A flaky {s} integration test timed out in CI last week because the test database was not warmed up.",
    ),
    (
        "workflow/ci",
        MemoryType::ExecutionSummary,
        "Ran the {s} test suite: 412 passed, 3 skipped, finished in 6 minutes.",
    ),
    (
        "workflow/code review",
        MemoryType::Preference,
        "Reviewers of {s} prefer small pull requests under 400 changed lines.",
    ),
    (
        "workflow/code review",
        MemoryType::Procedural,
        "Every {s} pull request needs a test that fails without the change.",
    ),
    (
        "preferences",
        MemoryType::Preference,
        "The {s} team prefers tabs over spaces in configuration files and 100-column lines in Rust.",
    ),
    ("preferences", MemoryType::Preference, "Status updates about {s} go to the team channel, not direct messages."),
    (
        "infrastructure/database",
        MemoryType::Semantic,
        "{s} stores its data in PostgreSQL 18 with pgvector; migrations live in the migrations folder.",
    ),
    (
        "infrastructure/database",
        MemoryType::Procedural,
        "Schema changes to {s} ship as small numbered migrations, one change each, applied before deploy.",
    ),
    (
        "infrastructure/deploy",
        MemoryType::Procedural,
        "Deploy {s} with the release pipeline; it builds arm64 Lambda zips and shifts traffic gradually.",
    ),
    (
        "infrastructure/deploy",
        MemoryType::Episodic,
        "The last {s} deployment was rolled back because a missing environment variable crashed cold starts.",
    ),
    (
        "incidents",
        MemoryType::Episodic,
        "Incident: {s} returned HTTP 503 for 12 minutes after the connection pool was exhausted.",
    ),
    (
        "incidents",
        MemoryType::Semantic,
        "Error E4021 from {s} means the refresh token expired; the client must re-authenticate.",
    ),
    (
        "customers",
        MemoryType::Semantic,
        "The largest customer of {s} sends bursts of 2,000 requests per second at the top of each hour.",
    ),
    (
        "customers",
        MemoryType::Preference,
        "Customer-facing messages about {s} outages use plain language and give an expected recovery time.",
    ),
];

const RESTRICTED: &[(&str, MemoryType, &str)] = &[
    (
        "infrastructure/database",
        MemoryType::Semantic,
        "The {s} production database password rotates monthly; the current one is in the vault entry prod/{s}/db.",
    ),
    (
        "customers",
        MemoryType::Semantic,
        "Contract terms for {s}'s largest customer include a 99.95% uptime credit clause.",
    ),
];

const SPECIFIC: &[(&str, MemoryType, &str)] = &[
    (
        "workflow/git",
        MemoryType::Semantic,
        "SSO callbacks are handled in src/auth/login.rs; the state parameter is checked there.",
    ),
    (
        "incidents",
        MemoryType::Semantic,
        "E5003 in the billing-api logs means the payment provider webhook signature did not verify.",
    ),
    ("preferences", MemoryType::Preference, "The user prefers concise answers with code first and explanations after."),
];

/// Loads the corpus through the ingest path (as an operator's curated import: active at once) unless the demo
/// organisations already have memories.
pub async fn seed(pool: &PgPool, model_dir: &Path) -> anyhow::Result<()> {
    let mut tx = store::begin_for_org(pool, ACME).await?;
    let existing: i64 = sqlx::query_scalar("SELECT count(*) FROM memory WHERE organization_id = $1")
        .bind(ACME)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    if existing > 0 {
        println!("demo corpus already loaded ({existing} memories in the first organisation)");
        return Ok(());
    }
    let ingestor = Ingestor::new(pool.clone(), Arc::new(MiniLm::new(model_dir)?));
    let mut total = 0;
    for (i, org) in [ACME, GLOBEX].into_iter().enumerate() {
        let mut tx = store::begin_for_org(pool, org).await?;
        store::agents::upsert(&mut *tx, org, CODER[i], "coder", Scope::ALL).await?;
        store::agents::upsert(&mut *tx, org, REVIEWER[i], "reviewer", &[Scope::Org]).await?;
        tx.commit().await?;
        for (n, memories) in corpus(i).chunks(MAX_MEMORIES).enumerate() {
            let batch = IngestBatch {
                job_type: Some(JobType::MemoryIngest),
                version: VERSION,
                organization_id: org,
                batch_id: format!("demo-{n}"),
                memories: memories.to_vec(),
            };
            total += ingestor.ingest(&batch, Admission::Active).await?.created;
        }
    }
    println!("demo corpus loaded: {total} memories in 2 organisations");
    Ok(())
}

/// The memories of demo organisation `i`, as an extraction service would hand them over.
fn corpus(i: usize) -> Vec<IngestMemory> {
    let mut rng = StdRng::seed_from_u64(40 + i as u64);
    let now = Utc::now();
    let mut memories = Vec::new();
    for service in SERVICES {
        let templates = TEMPLATES.iter().map(|t| (t, Sensitivity::Normal));
        let restricted = RESTRICTED.iter().map(|t| (t, Sensitivity::Restricted));
        for ((path, memory_type, template), sensitivity) in templates.chain(restricted) {
            let (scope, project_id, task_id, agent_id) = match rng.random_range(0..100) {
                0..50 => (Scope::Org, None, None, None),
                50..75 => (Scope::Project, Some(PROJECT[i]), None, None),
                75..85 => (Scope::Task, Some(PROJECT[i]), Some(TASK[i]), None),
                _ => (Scope::AgentPrivate, None, None, Some(CODER[i])),
            };
            let (source_kind, trust_level) = if rng.random_bool(0.5) {
                (SourceKind::Human, TrustLevel::Verified)
            } else {
                (SourceKind::ConversationTurn, TrustLevel::Unverified)
            };
            let source_ref = format!("run-{}/turn-{}", rng.random_range(100..999), rng.random_range(1..40));
            memories.push(IngestMemory {
                scope,
                project_id,
                task_id,
                agent_id,
                sensitivity,
                confidence: rng.random_range(0.55..0.98),
                tags: vec![service.to_string()],
                labels: [("service".to_string(), service.to_string())].into(),
                taxonomy: vec![path.to_string()],
                entities: vec![EntityRef { name: service.to_string(), kind: "service".into() }],
                created_at: Some(now - Duration::hours(rng.random_range(1..24 * 365))),
                ..IngestMemory::new(
                    template.replace("{s}", service),
                    *memory_type,
                    IngestProvenance::new(source_kind, source_ref, trust_level),
                )
            });
        }
    }
    for (path, memory_type, content) in SPECIFIC {
        memories.push(IngestMemory {
            confidence: 0.9,
            taxonomy: vec![path.to_string()],
            ..IngestMemory::new(
                content.to_string(),
                *memory_type,
                IngestProvenance::new(SourceKind::Human, "demo", TrustLevel::Verified),
            )
        });
    }
    memories
}
