//! The schema's isolation guarantees, read from the catalog and exercised through the application role.

use integration_tests::{Db, memory};
use sqlx::{
    Row,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use uuid::Uuid;

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn every_tenant_table_forces_row_level_security_with_a_policy(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let rows = sqlx::query(
        "SELECT c.relname::text AS name, c.relrowsecurity, c.relforcerowsecurity, \
                (SELECT count(*) FROM pg_policies p WHERE p.schemaname = 'public' AND p.tablename = c.relname) AS policies \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'public' AND c.relkind = 'r' \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'organization_id')",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(rows.len() >= 8, "expected every tenant table, found {}", rows.len());
    for row in rows {
        let name: String = row.get("name");
        assert!(row.get::<bool, _>("relrowsecurity"), "{name} has RLS disabled");
        assert!(row.get::<bool, _>("relforcerowsecurity"), "{name} does not FORCE RLS");
        assert!(row.get::<i64, _>("policies") > 0, "{name} has no policy");
    }
}

/// Distribution by organisation (Citus, Aurora Limitless, hash partitions; docs/scaling.md) needs every key to
/// lead with the distribution column: each primary key, unique index and foreign key (on both of its sides), and
/// every table to carry it. The migration ledger is the one table outside the tenants' data.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn organization_id_leads_every_primary_unique_and_foreign_key(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let tables: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.relname::text, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                                          AND a.attname = 'organization_id' AND NOT a.attisdropped) \
         FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') \
           AND c.relname <> '_sqlx_migrations'",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(tables.len() >= 18, "{tables:?}");
    for (table, has_organization) in &tables {
        assert!(has_organization, "{table} has no organization_id");
    }
    // Unique indexes include the primary keys and unique constraints (each has one).
    let unique: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT i.indexrelid::regclass::text, a.attname::text FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indrelid \
         LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
         WHERE c.relnamespace = 'public'::regnamespace AND i.indisunique AND c.relname <> '_sqlx_migrations'",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(unique.len() >= tables.len(), "{unique:?}");
    for (index, first) in unique {
        assert_eq!(first.as_deref(), Some("organization_id"), "unique index {index} leads with {first:?}");
    }
    let foreign: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT con.conname::text, a.attname::text, fa.attname::text FROM pg_constraint con \
         JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1] \
         JOIN pg_attribute fa ON fa.attrelid = con.confrelid AND fa.attnum = con.confkey[1] \
         WHERE con.contype = 'f' AND con.connamespace = 'public'::regnamespace",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(foreign.len() >= 10, "{foreign:?}");
    for (key, from, to) in foreign {
        assert_eq!((from.as_str(), to.as_str()), ("organization_id", "organization_id"), "foreign key {key}");
    }
}

/// The cross-organisation sweeps, named: the relay and the scheduled sweeps read the organisation registry
/// (`domain_event_outbox_org`: ids and the sweeps' stamps, nothing of a memory) to pick whose turn it is, then work
/// one organisation at a time. Every other statement sees one organisation: each policy on every other table is
/// `organization_id = app_current_org()` (one value per transaction), no function runs with its owner's rights, and
/// only the outbox module names the registry.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn no_statement_outside_the_named_sweeps_reads_more_than_one_organisation(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    const REGISTRY: &str = "domain_event_outbox_org";
    let db = Db::new(opts, conn).await;
    /// Table, policy, command, USING and WITH CHECK.
    type Policy = (String, String, String, Option<String>, Option<String>);
    let policies: Vec<Policy> = sqlx::query_as(
        "SELECT tablename::text, policyname::text, cmd::text, qual, with_check FROM pg_policies \
         WHERE schemaname = 'public'",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    let one_organisation = "(organization_id = app_current_org())";
    let mut sweeps = Vec::new();
    for (table, policy, command, using, check) in &policies {
        let scoped = [using, check].iter().all(|c| c.as_deref().is_none_or(|c| c == one_organisation))
            && (using.is_some() || check.is_some());
        if !scoped {
            sweeps.push(format!("{table}.{policy} ({command})"));
        }
    }
    sweeps.sort();
    assert_eq!(
        sweeps,
        [format!("{REGISTRY}.relay_reads_every_id (SELECT)"), format!("{REGISTRY}.relay_stamps_sweeps (UPDATE)")],
        "policies that let a statement see more than one organisation"
    );
    let registry_columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
    )
    .bind(REGISTRY)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    for column in &registry_columns {
        assert!(
            column == "organization_id" || column.ends_with("_at"),
            "{REGISTRY}.{column}: more than ids and stamps"
        );
    }
    let definers: Vec<String> = sqlx::query_scalar(
        "SELECT proname::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND prosecdef",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(definers.is_empty(), "functions that bypass the policies: {definers:?}");

    // The statements (comments aside): only the module of turns (the registry and the sweeps' stamps) names it.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut naming = Vec::new();
    for dir in ["shared", "functions", "tools/src"] {
        for file in rust_files(&root.join(dir)) {
            let source = std::fs::read_to_string(&file).unwrap();
            if source.lines().any(|line| line.contains(REGISTRY) && !line.trim_start().starts_with("//")) {
                naming.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(naming, ["shared/store/src/turns.rs"], "statements naming {REGISTRY}");
}

fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn application_role_is_neither_owner_superuser_nor_bypassrls(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let (superuser, bypass): (bool, bool) =
        sqlx::query_as("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&db.app)
            .await
            .unwrap();
    assert!(!superuser && !bypass);
    let owned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) = 'memory_app'",
    )
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(owned, 0, "memory_app owns relations");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn pgvector_is_at_least_0_8(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let version: String = sqlx::query_scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        .fetch_one(&db.admin)
        .await
        .unwrap();
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(parts[0] > 0 || parts[1] >= 8, "pgvector {version}");
    let server: i32 =
        sqlx::query_scalar("SELECT current_setting('server_version_num')::int").fetch_one(&db.admin).await.unwrap();
    assert!(server >= 180000, "PostgreSQL {server}");
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn without_an_organization_set_reads_see_nothing_and_writes_fail(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    memory(org, "a fact").insert(&db).await;

    let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM memory").fetch_one(&db.app).await.unwrap();
    assert_eq!(visible, 0);
    let write = sqlx::query(
        "INSERT INTO memory (organization_id, id, scope, memory_type, content) VALUES ($1, $2, 'org', 'semantic', 'x')",
    )
    .bind(org)
    .bind(Uuid::now_v7())
    .execute(&db.app)
    .await;
    let error = write.expect_err("insert without an organisation must fail");
    assert!(error.to_string().contains("row-level security"), "{error}");
    let updated = sqlx::query("UPDATE memory SET content = 'y'").execute(&db.app).await.unwrap();
    assert_eq!(updated.rows_affected(), 0);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn one_tenants_setting_does_not_leak_to_the_next_through_a_single_connection(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn.clone()).await;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    memory(a, "tenant A's fact").insert(&db).await;
    memory(b, "tenant B's fact").insert(&db).await;
    let pool = PgPoolOptions::new().max_connections(1).connect_with(conn.username("memory_app")).await.unwrap();

    let mut tx = memory_core::store::begin_for_org(&pool, a).await.unwrap();
    let seen: Vec<String> = sqlx::query_scalar("SELECT content FROM memory").fetch_all(&mut *tx).await.unwrap();
    assert_eq!(seen, vec!["tenant A's fact".to_string()]);
    tx.commit().await.unwrap();

    // Same physical connection, no setting: nothing.
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM memory").fetch_one(&pool).await.unwrap();
    assert_eq!(after, 0);

    let mut tx = memory_core::store::begin_for_org(&pool, b).await.unwrap();
    let seen: Vec<String> = sqlx::query_scalar("SELECT content FROM memory").fetch_all(&mut *tx).await.unwrap();
    assert_eq!(seen, vec!["tenant B's fact".to_string()]);
    tx.rollback().await.unwrap();
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_one_round_trip_context_read_sees_one_tenant_and_leaves_no_setting_behind(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    use memory_core::{domain::Scope, store};

    let db = Db::new(opts, conn.clone()).await;
    let (a, b, agent) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    memory(a, "tenant A's fact").insert(&db).await;
    for (org, name) in [(a, "billing"), (b, "secrets of B")] {
        let mut tx = store::begin_for_org(&db.admin, org).await.unwrap();
        store::taxonomy::upsert_node(&mut *tx, org, None, name).await.unwrap();
        store::agents::upsert(&mut *tx, org, agent, "same id in both tenants", &[Scope::Org, Scope::Task])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let mut tx = store::begin_for_org(&db.admin, b).await.unwrap();
    store::agents::upsert(&mut *tx, b, agent, "B's agent", &[Scope::Org, Scope::Project, Scope::AgentPrivate])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let pool = PgPoolOptions::new().max_connections(1).connect_with(conn.username("memory_app")).await.unwrap();

    let context = store::agents::retrieval_context(&pool, a, Some(agent)).await.unwrap();
    assert_eq!(context.read_scopes, Some(vec![Scope::Org, Scope::Task]));
    let names: Vec<&str> = context.taxonomy.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["billing"]);
    assert!(!context.has_entity_profiles);
    let without_agent = store::agents::retrieval_context(&pool, a, None).await.unwrap();
    assert_eq!(without_agent.read_scopes, None);

    // Same physical connection afterwards: the organisation setting is gone, so RLS shows nothing.
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM memory").fetch_one(&pool).await.unwrap();
    assert_eq!(after, 0);
    let setting: Option<String> = sqlx::query_scalar("SELECT nullif(current_setting('app.organization_id', true), '')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(setting, None);
}

#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn a_memory_with_its_embedding_and_a_paragraph_of_text_stays_whole_in_its_heap_row(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let db = Db::new(opts, conn).await;
    let org = Uuid::now_v7();
    // 1.5 kB of embedding and 0.6 kB of text: over the default TOAST threshold (about 2 kB).
    let text = "The deploy pipeline rolls back when the canary's error rate doubles; ".repeat(9);
    for i in 0..20 {
        let embedding: Vec<f32> = (0..384).map(|d| ((d * 7 + i) % 13) as f32 / 13.0 + 0.01).collect();
        memory(org, &format!("{text} (#{i})")).embedding(embedding).insert(&db).await;
    }
    let mut tx = memory_core::store::begin_for_org(&db.admin, org).await.unwrap();
    let (row_bytes, toast_bytes): (i32, i64) = sqlx::query_as(
        "SELECT (SELECT max(pg_column_size(m.*)) FROM memory m), \
                pg_relation_size(c.reltoastrelid) FROM pg_class c WHERE c.oid = 'memory'::regclass",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert!(row_bytes > 2100, "the rows are meant to exceed the default threshold: {row_bytes} bytes");
    assert_eq!(toast_bytes, 0, "embeddings or text were moved to the TOAST table");
}

/// Every session of the services is bounded in this database: a transaction left idle ends after 10 s (a warm Lambda
/// frozen before its connection's release ended a read's transaction), a lock wait after 5 s, a statement after 30 s.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn the_services_sessions_are_bounded(opts: PgPoolOptions, conn: PgConnectOptions) {
    let db = Db::new(opts, conn).await;
    let bounds: (String, String, String) = sqlx::query_as(
        "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout'), \
                current_setting('statement_timeout')",
    )
    .fetch_one(&db.app)
    .await
    .unwrap();
    assert_eq!(bounds, ("10s".into(), "5s".into(), "30s".into()));
}

/// The schema starts from one baseline (`migrations/0001_baseline.sql`), dumped from the chain of migrations it
/// replaced (kept in `tests/fixtures/migration-chain/`): both build the same schema, compared as
/// `pg_dump --schema-only` gives it.
#[sqlx::test(migrations = false)]
async fn the_baseline_builds_the_schema_the_migration_chain_built(opts: PgPoolOptions, conn: PgConnectOptions) {
    let chain = opts.clone().connect_with(conn.clone()).await.unwrap();
    migration_chain().await.run(&chain).await.unwrap();
    let name = format!("baseline_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(&format!("CREATE DATABASE {name}")).execute(&chain).await.unwrap();
    let baseline_conn = conn.clone().database(&name);
    let baseline = opts.connect_with(baseline_conn.clone()).await.unwrap();
    let first = memory_core::store::MIGRATOR.iter().next().expect("the baseline");
    assert_eq!(first.description, "baseline");
    sqlx::raw_sql(&format!("BEGIN; {} COMMIT;", first.sql)).execute(&baseline).await.unwrap();
    baseline.close().await;

    let (from_chain, from_baseline) = (schema_dump(&conn), schema_dump(&baseline_conn));
    sqlx::raw_sql(&format!("DROP DATABASE {name}")).execute(&chain).await.unwrap();
    assert!(from_chain.contains("CREATE TABLE public.memory ("), "{from_chain}");
    let first_difference = from_chain.lines().zip(from_baseline.lines()).find(|(a, b)| a != b);
    assert_eq!(first_difference, None, "the dumps differ");
    assert_eq!(from_chain.lines().count(), from_baseline.lines().count(), "the dumps differ in length");
}

/// A database the old chain migrated cannot take the baseline: migrating it fails, changing nothing, and says to
/// recreate it.
#[sqlx::test(migrations = false)]
async fn migrating_a_database_of_the_replaced_chain_fails_and_says_to_recreate_it(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let pool = opts.connect_with(conn).await.unwrap();
    migration_chain().await.run(&pool).await.unwrap();
    let error = memory_core::store::migrate(&pool, None).await.unwrap_err().to_string();
    assert!(error.contains("make clean"), "{error}");
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations").fetch_one(&pool).await.unwrap();
    assert_eq!(applied, 36, "the ledger changed");
}

/// A database migrated by a newer build (a migration this build does not know) is refused too, without the advice
/// to recreate it.
#[sqlx::test(migrator = "memory_core::store::MIGRATOR")]
async fn migrating_a_database_of_a_newer_build_fails_and_says_so(opts: PgPoolOptions, conn: PgConnectOptions) {
    let pool = opts.connect_with(conn).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer build', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let error = memory_core::store::migrate(&pool, None).await.unwrap_err().to_string();
    assert!(error.contains("newer build") && !error.contains("make clean"), "{error}");
}

/// The migrations the baseline replaced, as sqlx runs a directory of them.
async fn migration_chain() -> sqlx::migrate::Migrator {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/migration-chain");
    sqlx::migrate::Migrator::new(dir).await.unwrap()
}

/// `pg_dump --schema-only --no-owner` of the database `conn` names (the migration ledger left out), without the
/// dump's per-run `\restrict` key.
fn schema_dump(conn: &PgConnectOptions) -> String {
    let bin = std::env::var("MEMORY_PG_BIN").expect("MEMORY_PG_BIN (.local/stack.env) names PostgreSQL's programs");
    let url = format!(
        "postgres://{}@{}:{}/{}",
        conn.get_username(),
        conn.get_host(),
        conn.get_port(),
        conn.get_database().unwrap()
    );
    let out = std::process::Command::new(format!("{bin}/pg_dump"))
        .args(["--schema-only", "--no-owner", "--exclude-table=_sqlx_migrations", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// 0003's backfill as a managed database runs it: the migrations' role owns the tables without bypassing RLS, and
/// still gives every organisation's current memories their active periods.
#[sqlx::test(migrations = false)]
async fn the_active_periods_backfill_reaches_every_organisation_as_an_owner_without_bypassrls(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let pool = opts.connect_with(conn).await.unwrap();
    let mut migrations = memory_core::store::MIGRATOR.iter();
    for migration in migrations.by_ref().take(2) {
        sqlx::raw_sql(&format!("BEGIN; {} COMMIT;", migration.sql)).execute(&pool).await.unwrap();
    }
    let orgs = [Uuid::now_v7(), Uuid::now_v7()];
    for org in orgs {
        sqlx::query("INSERT INTO memory (organization_id, id, scope, memory_type, content) VALUES ($1, $2, 'org', 'semantic', 'x')")
            .bind(org)
            .bind(Uuid::now_v7())
            .execute(&pool)
            .await
            .unwrap();
    }
    let owner = format!("owner_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(&format!(
        "CREATE ROLE {owner} NOLOGIN NOSUPERUSER NOBYPASSRLS; GRANT CREATE ON SCHEMA public TO {owner}; \
         GRANT memory_app TO {owner}; ALTER TABLE memory OWNER TO {owner};"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let third = migrations.next().expect("0003");
    assert_eq!(third.version, 3);
    sqlx::raw_sql(&format!("BEGIN; SET LOCAL ROLE {owner}; {} COMMIT;", third.sql)).execute(&pool).await.unwrap();
    let periods: Vec<Uuid> = sqlx::query_scalar("SELECT organization_id FROM memory_active_period ORDER BY 1")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(periods, orgs.to_vec(), "each organisation's memory has its period");
    let forced: Vec<bool> = sqlx::query_scalar(
        "SELECT relforcerowsecurity FROM pg_class WHERE relname IN ('memory', 'memory_active_period') ORDER BY relname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(forced, [true, true], "RLS forced again on both");
}
