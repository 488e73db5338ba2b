//! The demo corpus: two organisations with projects, agents, every scope, a taxonomy, entities and restricted
//! memories, embedded with MiniLM. Deterministic (fixed seed), so README examples always find the same things.

use std::path::Path;

use chrono::{Duration, Utc};
use memory_core::{
    domain::{MemoryType, NewMemory, Scope, Sensitivity, SourceKind, TrustLevel},
    embed::{Embedder, MiniLm},
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

/// Loads the corpus unless the demo organisations already have memories.
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
    let embedder = MiniLm::new(model_dir)?;
    let mut total = 0;
    for (i, org) in [ACME, GLOBEX].into_iter().enumerate() {
        total += seed_organization(pool, &embedder, i, org).await?;
    }
    println!("demo corpus loaded: {total} memories in 2 organisations");
    Ok(())
}

async fn seed_organization(pool: &PgPool, embedder: &MiniLm, i: usize, org: Uuid) -> anyhow::Result<usize> {
    let mut rng = StdRng::seed_from_u64(40 + i as u64);
    let mut rows: Vec<(&str, NewMemory, Option<&str>)> = Vec::new();
    let now = Utc::now();
    for service in SERVICES {
        let templates = TEMPLATES.iter().map(|t| (t, Sensitivity::Normal));
        let restricted = RESTRICTED.iter().map(|t| (t, Sensitivity::Restricted));
        for ((path, memory_type, template), sensitivity) in templates.chain(restricted) {
            let content = template.replace("{s}", service);
            let mut m = NewMemory::new(org, *memory_type, content);
            m.sensitivity = sensitivity;
            m.confidence = rng.random_range(0.55..0.98);
            m.created_at = Some(now - Duration::hours(rng.random_range(1..24 * 365)));
            m.tags = vec![service.to_string()];
            m.labels = serde_json::json!({ "service": service });
            m.provenance.source_kind = SourceKind::ChatMessage;
            m.provenance.trust_level = if rng.random_bool(0.5) { TrustLevel::Verified } else { TrustLevel::Unverified };
            m.provenance.source_ref =
                Some(format!("run-{}/turn-{}", rng.random_range(100..999), rng.random_range(1..40)));
            match rng.random_range(0..100) {
                0..50 => {}
                50..75 => {
                    m.scope = Scope::Project;
                    m.project_id = Some(PROJECT[i]);
                }
                75..85 => {
                    m.scope = Scope::Task;
                    m.project_id = Some(PROJECT[i]);
                    m.project_task_id = Some(TASK[i]);
                }
                _ => {
                    m.scope = Scope::AgentPrivate;
                    m.agent_id = Some(CODER[i]);
                }
            }
            rows.push((path, m, Some(service)));
        }
    }
    for (path, memory_type, content) in SPECIFIC {
        let mut m = NewMemory::new(org, *memory_type, *content);
        m.confidence = 0.9;
        m.provenance.trust_level = TrustLevel::Verified;
        rows.push((path, m, None));
    }

    let texts: Vec<String> = rows.iter().map(|(_, m, _)| m.content.clone()).collect();
    let vectors = embedder.embed(&texts).await?;

    let mut tx = store::begin_for_org(pool, org).await?;
    store::agents::upsert(&mut *tx, org, CODER[i], "coder", Scope::ALL).await?;
    store::agents::upsert(&mut *tx, org, REVIEWER[i], "reviewer", &[Scope::Org]).await?;
    for ((path, mut m, service), vector) in rows.into_iter().zip(vectors) {
        m.embedding = Some(vector);
        let memory = store::memories::insert(&mut *tx, &m).await?;
        let mut parent = None;
        for name in path.split('/') {
            parent = Some(store::taxonomy::upsert_node(&mut *tx, org, parent, name).await?);
        }
        if let Some(node) = parent {
            store::taxonomy::tag(&mut *tx, org, memory.id, node).await?;
        }
        if let Some(service) = service {
            let entity = store::entities::upsert(&mut *tx, org, "service", service).await?;
            store::entities::add_mention(&mut *tx, org, entity, memory.id).await?;
        }
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM memory WHERE organization_id = $1")
        .bind(org)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(count as usize)
}
