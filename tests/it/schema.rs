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

/// On a managed database the migrations' role owns the tables without BYPASSRLS, so forced row-level security hides
/// every organisation's rows from it. Migration 0033 packs the postings written before it and marks them packed: run
/// by such an owner, it must still list them all, or the keyword branch would never find those memories again.
#[sqlx::test(migrations = false)]
async fn the_packing_migration_lists_every_organisations_postings_when_its_role_has_no_bypassrls(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let admin = opts.connect_with(conn).await.unwrap();
    let (earlier, packing): (Vec<_>, Vec<_>) =
        memory_core::store::MIGRATOR.iter().filter(|m| m.version <= 33).partition(|m| m.version < 33);
    for migration in earlier {
        sqlx::raw_sql(&migration.sql).execute(&admin).await.unwrap();
    }
    let org = Uuid::now_v7();
    // Inserted as the schema before 0033 has it (today's insert names later columns).
    let mut tx = memory_core::store::begin_for_org(&admin, org).await.unwrap();
    sqlx::query(
        "INSERT INTO memory (organization_id, id, scope, memory_type, content) \
         VALUES ($1, gen_random_uuid(), 'org', 'semantic', 'kestrel osprey heron')",
    )
    .bind(org)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let owner = format!("schema_owner_{}", Uuid::now_v7().simple());
    let mut session = admin.acquire().await.unwrap();
    hand_the_schema_to(&mut session, &owner).await;
    sqlx::raw_sql(&format!("BEGIN; {} COMMIT;", packing[0].sql)).execute(&mut *session).await.unwrap();
    take_the_schema_back(&mut session, &owner).await;

    let listed: Vec<String> =
        sqlx::query_scalar("SELECT lexeme FROM memory_posting_list WHERE organization_id = $1 ORDER BY lexeme")
            .bind(org)
            .fetch_all(&admin)
            .await
            .unwrap();
    assert_eq!(listed, ["heron", "kestrel", "osprey"]);
}

/// Migrations 0012, 0014 and 0030 built the keyword statistics and postings from `memory`, which forces row-level
/// security: run by an owner without BYPASSRLS, as on a managed database, they read none of the memories already
/// written. Migrated that way from before the statistics existed, a database must still end with postings and
/// statistics that agree with its memories' text, and the packed lists read as the postings.
#[sqlx::test(migrations = false)]
async fn migrating_as_an_owner_without_bypassrls_leaves_the_keyword_index_as_the_memories_text_gives(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let (db, orgs) =
        migrate_with_memories(opts, conn, Some(&format!("schema_owner_{}", Uuid::now_v7().simple()))).await;
    assert_keyword_index_agrees_with_the_text(&db, orgs).await;
}

/// Where the migrations' role read every row, the repair (0034) finds nothing to write: the postings 0033 packed
/// stay packed, none is recorded gone, and the index agrees with the text.
#[sqlx::test(migrations = false)]
async fn migrating_as_the_superuser_leaves_the_keyword_repair_nothing_to_write(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let (db, orgs) = migrate_with_memories(opts, conn, None).await;
    assert_keyword_index_agrees_with_the_text(&db, orgs).await;
    let unpacked: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_posting WHERE NOT packed), (SELECT count(*) FROM memory_posting_gone)",
    )
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(unpacked, (0, 0), "postings the repair rewrote (tail, gone)");
}

/// Runs every migration on a new database, writing memories of two organisations before 0012 (before any keyword
/// statistics or postings) and one before 0030 (before the code words); with `owner`, from 0012 on as that owner
/// ([`hand_the_schema_to`]).
async fn migrate_with_memories(opts: PgPoolOptions, conn: PgConnectOptions, owner: Option<&str>) -> (Db, [Uuid; 2]) {
    let admin = opts.clone().connect_with(conn.clone()).await.unwrap();
    let mut session = admin.acquire().await.unwrap();
    let orgs = [Uuid::now_v7(), Uuid::now_v7()];
    let write = |org: Uuid, content: &str| {
        format!(
            "BEGIN; SELECT set_config('app.organization_id', '{org}', true); \
             INSERT INTO memory (organization_id, id, scope, memory_type, content) \
             VALUES ('{org}', '{}', 'org', 'semantic', '{content}'); COMMIT",
            Uuid::now_v7()
        )
    };
    for migration in memory_core::store::MIGRATOR.iter() {
        match migration.version {
            12 => {
                sqlx::raw_sql(&write(orgs[0], "The parseConfig helper reads auth_service settings"))
                    .execute(&mut *session)
                    .await
                    .unwrap();
                sqlx::raw_sql(&write(orgs[1], "kestrel osprey heron")).execute(&mut *session).await.unwrap();
                if let Some(owner) = owner {
                    hand_the_schema_to(&mut session, owner).await;
                }
            }
            30 => {
                sqlx::raw_sql(&write(orgs[1], "Call loadUserProfile from session_store"))
                    .execute(&mut *session)
                    .await
                    .unwrap();
            }
            _ => {}
        }
        let sql = if migration.no_tx { migration.sql.to_string() } else { format!("BEGIN; {} COMMIT;", migration.sql) };
        sqlx::raw_sql(&sql)
            .execute(&mut *session)
            .await
            .unwrap_or_else(|e| panic!("migration {} as {owner:?}: {e}", migration.version));
    }
    if let Some(owner) = owner {
        take_the_schema_back(&mut session, owner).await;
    }
    drop(session);
    (Db::new(opts, conn).await, orgs)
}

/// Postings and BM25 statistics are what the memories' text gives, code words included, and the packed lists read as
/// the postings.
async fn assert_keyword_index_agrees_with_the_text(db: &Db, orgs: [Uuid; 2]) {
    let differences: Vec<String> = sqlx::query_scalar(
        "WITH expected AS (
             SELECT m.organization_id, m.id AS memory_id, u.lexeme, greatest(cardinality(u.positions), 1) AS tf,
                    length(m.content_tsv) AS doc_length
             FROM memory m, unnest(m.content_tsv) u),
         postings AS (SELECT organization_id, memory_id, lexeme, tf, doc_length FROM memory_posting),
         terms AS (SELECT organization_id, lexeme, count(*) AS n FROM expected GROUP BY 1, 2),
         term_stats AS (SELECT organization_id, lexeme, sum(doc_count)::bigint FROM memory_term_stats
                        GROUP BY 1, 2 HAVING sum(doc_count) <> 0),
         corpus AS (SELECT organization_id, count(*), sum(length(content_tsv))::bigint FROM memory GROUP BY 1),
         corpus_stats AS (SELECT organization_id, doc_count, total_length FROM memory_corpus_totals)
         SELECT 'posting ' || d::text FROM ((TABLE expected EXCEPT TABLE postings)
                                          UNION ALL (TABLE postings EXCEPT TABLE expected)) d
         UNION ALL
         SELECT 'term ' || d::text FROM ((TABLE terms EXCEPT TABLE term_stats)
                                       UNION ALL (TABLE term_stats EXCEPT TABLE terms)) d
         UNION ALL
         SELECT 'corpus ' || d::text FROM ((TABLE corpus EXCEPT TABLE corpus_stats)
                                         UNION ALL (TABLE corpus_stats EXCEPT TABLE corpus)) d",
    )
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert!(differences.is_empty(), "{differences:#?}");
    let code_words: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_posting WHERE lexeme IN ('authservic', 'sessionstor')")
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert_eq!(code_words, 2, "the code words' postings are missing");
    for org in orgs {
        assert_eq!(crate::search::postings_read_apart_from_truth(db, org).await, Vec::<String>::new());
    }
}

/// Gives every table, view and function of the public schema (those of extensions apart) to a new role with neither
/// SUPERUSER nor BYPASSRLS, as a managed database's owner is, and continues the session as it.
async fn hand_the_schema_to(session: &mut sqlx::PgConnection, owner: &str) {
    sqlx::raw_sql(&format!(
        "CREATE ROLE {owner} NOSUPERUSER NOBYPASSRLS CREATEROLE;
         GRANT CREATE ON SCHEMA public TO {owner};
         DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO {owner}', current_database()); END $$;
         GRANT memory_app TO {owner} WITH ADMIN OPTION;
         DO $$
         DECLARE o record;
         BEGIN
             FOR o IN SELECT c.oid::regclass AS name FROM pg_class c
                      WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v', 'p')
                        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
             LOOP
                 EXECUTE format('ALTER TABLE %s OWNER TO {owner}', o.name);
             END LOOP;
             FOR o IN SELECT p.oid::regprocedure AS name FROM pg_proc p
                      WHERE p.pronamespace = 'public'::regnamespace
                        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
             LOOP
                 EXECUTE format('ALTER ROUTINE %s OWNER TO {owner}', o.name);
             END LOOP;
         END $$;
         SET ROLE {owner}"
    ))
    .execute(session)
    .await
    .unwrap();
}

/// Ends what [`hand_the_schema_to`] began: the session's own role again owns the schema, and the owner is dropped.
async fn take_the_schema_back(session: &mut sqlx::PgConnection, owner: &str) {
    sqlx::raw_sql(&format!(
        "RESET ROLE; REASSIGN OWNED BY {owner} TO CURRENT_USER; DROP OWNED BY {owner}; DROP ROLE {owner}"
    ))
    .execute(session)
    .await
    .unwrap();
}

/// Migration 0036 deletes what forgetting used to leave in the keyword index (lists packed empty, statistics of
/// words no memory holds, records of postings gone from lists that no longer exist), in every organisation when
/// its role has no BYPASSRLS, and keeps the rows of words memories still hold.
#[sqlx::test(migrations = false)]
async fn the_forgetting_migration_deletes_the_keyword_rows_of_words_no_memory_holds(
    opts: PgPoolOptions,
    conn: PgConnectOptions,
) {
    let admin = opts.connect_with(conn).await.unwrap();
    let (earlier, later): (Vec<_>, Vec<_>) =
        memory_core::store::MIGRATOR.iter().filter(|m| m.version <= 36).partition(|m| m.version < 36);
    for migration in earlier {
        sqlx::raw_sql(&migration.sql).execute(&admin).await.unwrap();
    }
    let orgs = [Uuid::now_v7(), Uuid::now_v7()];
    for org in orgs {
        let mut tx = memory_core::store::begin_for_org(&admin, org).await.unwrap();
        sqlx::query(
            "INSERT INTO memory (organization_id, id, scope, memory_type, content) \
             VALUES ($1, gen_random_uuid(), 'org', 'semantic', 'kestrel osprey')",
        )
        .bind(org)
        .execute(&mut *tx)
        .await
        .unwrap();
        // What a forgotten "the train leaves on Thursdays" left: an empty list, statistics summing to zero in two
        // shards, and a record of a posting gone from a list that is no more.
        for sql in [
            "INSERT INTO memory_posting_list (organization_id, lexeme, postings) VALUES ($1, 'thursday', ''::bytea)",
            "INSERT INTO memory_term_stats (organization_id, lexeme, shard, doc_count) \
             VALUES ($1, 'thursday', 90, 0), ($1, 'train', 90, 1), ($1, 'train', 91, -1)",
            "INSERT INTO memory_posting_gone (organization_id, lexeme, memory_id) VALUES ($1, 'leav', gen_random_uuid())",
        ] {
            sqlx::query(sql).bind(org).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
    }

    let owner = format!("schema_owner_{}", Uuid::now_v7().simple());
    let mut session = admin.acquire().await.unwrap();
    hand_the_schema_to(&mut session, &owner).await;
    sqlx::raw_sql(&format!("BEGIN; {} COMMIT;", later[0].sql)).execute(&mut *session).await.unwrap();
    take_the_schema_back(&mut session, &owner).await;

    for org in orgs {
        let words =
            async |sql: &str| -> Vec<String> { sqlx::query_scalar(sql).bind(org).fetch_all(&admin).await.unwrap() };
        let stats = "SELECT DISTINCT lexeme FROM memory_term_stats WHERE organization_id = $1 ORDER BY 1";
        assert_eq!(words(stats).await, ["kestrel", "osprey"]);
        assert!(words("SELECT lexeme FROM memory_posting_list WHERE organization_id = $1").await.is_empty());
        assert!(words("SELECT lexeme FROM memory_posting_gone WHERE organization_id = $1").await.is_empty());
        let postings = "SELECT DISTINCT lexeme FROM memory_posting WHERE organization_id = $1 ORDER BY 1";
        assert_eq!(words(postings).await, ["kestrel", "osprey"], "the postings of words memories hold stay");
    }
}
