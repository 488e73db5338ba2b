//! Properties over generated worlds: who reads what, as the SQL scope predicate decides it, agrees with an
//! independent oracle of the documented rules, and `Readership::reaches` never admits a replacement or a derived
//! memory that someone could read without being able to read its source.
//!
//! Each run draws a fresh seed, printed first (`MEMORY_PROPERTY_SEED=<seed>` replays it); a failing world is shrunk
//! to a smaller one that still fails before it is reported. Worlds hold two organisations and memories of every
//! status (candidate, active, superseded, archived, expired, forgotten: a tombstone, as forgetting leaves it), read
//! with and without history, and by the audit filter (reads by id and chains).

use integration_tests::{Db, memory};
use memory_core::{
    domain::{Memory, MemoryStatus, Readership, Scope},
    store::{self, ReadFilter},
};
use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, TestRunner},
};
use sqlx::{
    QueryBuilder,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use uuid::Uuid;

/// Ids drawn from a few of each, so generated memories and principals meet.
const PROJECTS: [Uuid; 2] =
    [uuid::uuid!("0b000000-0000-4000-8000-000000000001"), uuid::uuid!("0b000000-0000-4000-8000-000000000002")];
const TASKS: [Uuid; 2] =
    [uuid::uuid!("0c000000-0000-4000-8000-000000000001"), uuid::uuid!("0c000000-0000-4000-8000-000000000002")];
const AGENTS: [Uuid; 2] =
    [uuid::uuid!("0d000000-0000-4000-8000-000000000001"), uuid::uuid!("0d000000-0000-4000-8000-000000000002")];

/// A memory's life as generated: its status, or expired (active, past its expiry).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Life {
    Status(MemoryStatus),
    Expired,
}

#[derive(Debug, Clone)]
struct GeneratedMemory {
    /// Of the world's first or second organisation.
    second: bool,
    life: Life,
    scope: Scope,
    project: Option<Uuid>,
    task: Option<Uuid>,
    agent: Option<Uuid>,
    restricted: bool,
}

#[derive(Debug, Clone)]
struct Principal {
    second: bool,
    history: bool,
    /// Reading by id or chain (`ReadFilter::for_audit`).
    audit: bool,
    read_scopes: Vec<Scope>,
    agent: Option<Uuid>,
    project: Option<Uuid>,
    task: Option<Uuid>,
    gate: bool,
}

fn one_of(ids: [Uuid; 2]) -> impl Strategy<Value = Uuid> {
    prop::sample::select(ids.to_vec())
}

fn scope() -> impl Strategy<Value = Scope> {
    prop::sample::select(Scope::ALL.to_vec())
}

fn life() -> impl Strategy<Value = Life> {
    prop_oneof![
        4 => Just(Life::Status(MemoryStatus::Active)),
        1 => Just(Life::Status(MemoryStatus::Candidate)),
        1 => Just(Life::Status(MemoryStatus::Superseded)),
        1 => Just(Life::Status(MemoryStatus::Archived)),
        1 => Just(Life::Status(MemoryStatus::Forgotten)),
        1 => Just(Life::Expired),
    ]
}

fn generated_memory() -> impl Strategy<Value = GeneratedMemory> {
    ((any::<bool>(), life()), scope(), one_of(PROJECTS), one_of(TASKS), prop::option::of(one_of(AGENTS)), any::<bool>())
        .prop_map(|((second, life), scope, project, task, agent, restricted)| GeneratedMemory {
            second,
            life,
            scope,
            // Each scope carries what it needs; a project memory may name its task's project too.
            project: matches!(scope, Scope::Project | Scope::Task).then_some(project),
            task: (scope == Scope::Task).then_some(task),
            agent: if scope == Scope::AgentPrivate { agent.or(Some(AGENTS[0])) } else { agent },
            restricted,
        })
}

fn principal() -> impl Strategy<Value = Principal> {
    (
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.2)),
        prop::collection::vec(scope(), 0..4),
        prop::option::of(one_of(AGENTS)),
        prop::option::of(one_of(PROJECTS)),
        prop::option::of(one_of(TASKS)),
        any::<bool>(),
    )
        .prop_map(|((second, history, audit), mut read_scopes, agent, project, task, gate)| {
            // Read scopes are a hierarchy rooted at org.
            read_scopes.push(Scope::Org);
            read_scopes.sort();
            read_scopes.dedup();
            Principal { second, history, audit, read_scopes, agent, project, task, gate }
        })
}

/// The documented rules, written independently of the SQL: only its own organisation's memories, current ones
/// (active, not expired), and superseded and archived ones too when asking for history (forgotten ones never); of
/// those, org memories for
/// everyone; project and task memories for a principal with that scope asking for that project or task; an agent's
/// own memories (whatever their scope) when it reads agent-private memories; restricted ones never behind the gate.
/// An audit read (by id, a chain) sees every status (a forgotten memory as its tombstone) and every project and task
/// its scopes admit, restricted too.
fn oracle_reads(p: &Principal, org: Uuid, m: &Memory, expired: bool) -> bool {
    let current = m.status == MemoryStatus::Active && !expired;
    let past = p.history && matches!(m.status, MemoryStatus::Superseded | MemoryStatus::Archived);
    if m.organization_id != org || !(p.audit || current || past) {
        return false;
    }
    if !p.audit && p.gate && m.sensitivity == memory_core::domain::Sensitivity::Restricted {
        return false;
    }
    let has = |s: Scope| p.read_scopes.contains(&s);
    let asked = |asked: Option<Uuid>, own: Option<Uuid>| p.audit || (asked.is_some() && own == asked);
    let by_scope = match m.scope {
        Scope::Org => true,
        Scope::Project => has(Scope::Project) && asked(p.project, m.project_id),
        Scope::Task => has(Scope::Task) && asked(p.task, m.project_task_id),
        Scope::AgentPrivate => false,
    };
    by_scope || (has(Scope::AgentPrivate) && p.agent.is_some() && m.agent_id == p.agent)
}

type World = (Vec<GeneratedMemory>, Vec<Principal>);

/// The first disagreement of the SQL predicate with the rules in `world`, stored afresh; the number of
/// principal-memory cases and reach implications checked.
async fn disagreement(db: &Db, world: &World) -> (Option<String>, usize, usize) {
    let (memories, principals) = world;
    let orgs = [Uuid::now_v7(), Uuid::now_v7()];
    let mut stored = Vec::new();
    for (i, g) in memories.iter().enumerate() {
        let org = orgs[usize::from(g.second)];
        let status = match g.life {
            Life::Status(status) => status,
            Life::Expired => MemoryStatus::Active,
        };
        let mut fixture = memory(org, &format!("memory {i}")).scope(g.scope).status(status);
        if let Some(project) = g.project {
            fixture = fixture.project(project);
        }
        if let Some(task) = g.task {
            fixture = fixture.task(task);
        }
        if let Some(agent) = g.agent {
            fixture = fixture.agent(agent);
        }
        if g.restricted {
            fixture = fixture.restricted();
        }
        let m = fixture.insert(db).await;
        if g.life == Life::Status(MemoryStatus::Forgotten) {
            // What forgetting leaves: the row without its content.
            sqlx::query(
                "UPDATE memory SET content = '', context = NULL, embedding = NULL, content_hash = NULL WHERE id = $1",
            )
            .bind(m.id)
            .execute(&db.admin)
            .await
            .unwrap();
        }
        if g.life == Life::Expired {
            sqlx::query("UPDATE memory SET expires_at = now() - interval '1 hour' WHERE id = $1")
                .bind(m.id)
                .execute(&db.admin)
                .await
                .unwrap();
        }
        stored.push((m, g.life == Life::Expired));
    }
    let (mut checked, mut implications) = (0usize, 0usize);
    for p in principals {
        let org = orgs[usize::from(p.second)];
        let mut filter = ReadFilter::for_retrieval(org, p.read_scopes.clone(), p.agent, p.project, p.task, p.gate);
        if p.history {
            filter = filter.with_history();
        }
        if p.audit {
            filter = ReadFilter::for_audit(org, p.read_scopes.clone(), p.agent);
        }
        // Read under the principal's organisation, as every request is (RLS in force).
        let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
        let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE ");
        filter.push_sql(&mut qb);
        let readable: Vec<Uuid> = qb.build_query_scalar().fetch_all(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        for (m, expired) in &stored {
            checked += 1;
            if readable.contains(&m.id) != oracle_reads(p, org, m, *expired) {
                let sql = readable.contains(&m.id);
                return (Some(format!("{p:?} reading {m:?} (expired: {expired}): the SQL says {sql}")), checked, 0);
            }
        }
        // Whoever reads b reads a, for every current a that reaches b: replacing b by a (or deriving a from b)
        // shows b's content to no one new.
        for (a, _) in stored.iter().filter(|(a, expired)| !expired && a.status == MemoryStatus::Active) {
            for (b, _) in &stored {
                if a.organization_id == b.organization_id && Readership::of(a).reaches(&Readership::of(b)) {
                    implications += 1;
                    if readable.contains(&b.id) && !readable.contains(&a.id) {
                        return (Some(format!("{p:?} reads {b:?} but not {a:?}, which reaches it")), checked, 0);
                    }
                }
            }
        }
    }
    (None, checked, implications)
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_scope_predicate_agrees_with_the_rules_and_reaches_never_widens_readers(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let worlds: usize = std::env::var("MEMORY_PROPERTY_WORLDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let seed: u64 = match std::env::var("MEMORY_PROPERTY_SEED") {
        Ok(seed) => seed.parse().expect("MEMORY_PROPERTY_SEED is a number"),
        Err(_) => Uuid::new_v4().as_u64_pair().0,
    };
    eprintln!("properties: seed {seed} (MEMORY_PROPERTY_SEED={seed} replays this run)");
    let mut runner =
        TestRunner::new(Config { rng_seed: proptest::test_runner::RngSeed::Fixed(seed), ..Config::default() });
    let world = (prop::collection::vec(generated_memory(), 40), prop::collection::vec(principal(), 30));
    let (mut checked, mut implications) = (0usize, 0usize);
    for _ in 0..worlds {
        let mut tree = world.new_tree(&mut runner).unwrap();
        let (failure, c, i) = disagreement(&db, &tree.current()).await;
        (checked, implications) = (checked + c, implications + i);
        let Some(mut failure) = failure else { continue };
        // Shrink as proptest does: simplify while the world fails, complicate when it passes, testing each.
        let (mut steps, mut failing) = (0, true);
        while steps < 200 && if failing { tree.simplify() } else { tree.complicate() } {
            steps += 1;
            match disagreement(&db, &tree.current()).await.0 {
                Some(smaller) => (failure, failing) = (smaller, true),
                None => failing = false,
            }
        }
        panic!("seed {seed} (MEMORY_PROPERTY_SEED={seed} replays it), shrunk {steps} steps: {failure}");
    }
    assert!(checked >= 10_000 || worlds < 10, "{checked} principal-memory cases");
    eprintln!("{checked} principal-memory cases, {implications} reach implications");
}
