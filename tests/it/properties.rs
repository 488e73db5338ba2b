//! Properties over generated worlds: who reads what, as the SQL scope predicate decides it, agrees with an
//! independent oracle of the documented rules, and `Readership::reaches` never admits a replacement or a derived
//! memory that someone could read without being able to read its source.

use integration_tests::{Db, memory};
use memory_core::{
    domain::{Memory, Readership, Scope},
    store::{self, ScopeFilter},
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

#[derive(Debug, Clone)]
struct GeneratedMemory {
    scope: Scope,
    project: Option<Uuid>,
    task: Option<Uuid>,
    agent: Option<Uuid>,
    restricted: bool,
}

#[derive(Debug, Clone)]
struct Principal {
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

fn generated_memory() -> impl Strategy<Value = GeneratedMemory> {
    (scope(), one_of(PROJECTS), one_of(TASKS), prop::option::of(one_of(AGENTS)), any::<bool>()).prop_map(
        |(scope, project, task, agent, restricted)| GeneratedMemory {
            scope,
            // Each scope carries what it needs; a project memory may name its task's project too.
            project: matches!(scope, Scope::Project | Scope::Task).then_some(project),
            task: (scope == Scope::Task).then_some(task),
            agent: if scope == Scope::AgentPrivate { agent.or(Some(AGENTS[0])) } else { agent },
            restricted,
        },
    )
}

fn principal() -> impl Strategy<Value = Principal> {
    (
        prop::collection::vec(scope(), 0..4),
        prop::option::of(one_of(AGENTS)),
        prop::option::of(one_of(PROJECTS)),
        prop::option::of(one_of(TASKS)),
        any::<bool>(),
    )
        .prop_map(|(mut read_scopes, agent, project, task, gate)| {
            // Read scopes are a hierarchy rooted at org.
            read_scopes.push(Scope::Org);
            read_scopes.sort();
            read_scopes.dedup();
            Principal { read_scopes, agent, project, task, gate }
        })
}

/// The documented rules, written independently of the SQL: org memories for everyone; project and task memories
/// for a principal with that scope asking for that project or task; an agent's own memories (whatever their scope)
/// when it reads agent-private memories; restricted ones never behind the gate.
fn oracle_reads(p: &Principal, m: &Memory) -> bool {
    if p.gate && m.sensitivity == memory_core::domain::Sensitivity::Restricted {
        return false;
    }
    let has = |s: Scope| p.read_scopes.contains(&s);
    let by_scope = match m.scope {
        Scope::Org => true,
        Scope::Project => has(Scope::Project) && p.project.is_some() && m.project_id == p.project,
        Scope::Task => has(Scope::Task) && p.task.is_some() && m.project_task_id == p.task,
        Scope::AgentPrivate => false,
    };
    by_scope || (has(Scope::AgentPrivate) && p.agent.is_some() && m.agent_id == p.agent)
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_scope_predicate_agrees_with_the_rules_and_reaches_never_widens_readers(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let worlds: usize = std::env::var("MEMORY_PROPERTY_WORLDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let mut runner =
        TestRunner::new(Config { rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..Config::default() });
    let world = (prop::collection::vec(generated_memory(), 40), prop::collection::vec(principal(), 30));
    let (mut checked, mut implications) = (0usize, 0usize);
    for _ in 0..worlds {
        let (memories, principals) = world.new_tree(&mut runner).unwrap().current();
        let org = Uuid::now_v7();
        let mut stored = Vec::new();
        for (i, g) in memories.iter().enumerate() {
            let mut fixture = memory(org, &format!("memory {i}")).scope(g.scope);
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
            stored.push(fixture.insert(&db).await);
        }
        for p in &principals {
            let filter = ScopeFilter::for_retrieval(org, p.read_scopes.clone(), p.agent, p.project, p.task, p.gate);
            let mut tx = store::begin_for_org(&db.app, org).await.unwrap();
            let mut qb = QueryBuilder::new("SELECT m.id FROM memory m WHERE ");
            filter.push_sql(&mut qb);
            let readable: Vec<Uuid> = qb.build_query_scalar().fetch_all(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
            for m in &stored {
                let sql = readable.contains(&m.id);
                assert_eq!(sql, oracle_reads(p, m), "{p:?} reading {m:?}");
                checked += 1;
            }
            // Whoever reads b reads a, for every a that reaches b: replacing b by a (or deriving a from b) shows b's
            // content to no one new.
            for a in &stored {
                for b in &stored {
                    if Readership::of(a).reaches(&Readership::of(b)) {
                        implications += 1;
                        assert!(
                            !readable.contains(&b.id) || readable.contains(&a.id),
                            "{p:?} reads {b:?} but not {a:?}, which reaches it"
                        );
                    }
                }
            }
        }
    }
    assert!(checked >= 10_000 || worlds < 10, "{checked} principal-memory cases");
    eprintln!("{checked} principal-memory cases, {implications} reach implications");
}
