//! Reading an organisation's memories whole, for export: each memory with its context, taxonomy paths and entity
//! mentions.

use futures_util::stream::BoxStream;
use sqlx::{PgConnection, types::Json};
use uuid::Uuid;

use super::MEMORY_COLUMNS;
use crate::domain::Memory;

/// One memory as exported.
#[derive(Debug, sqlx::FromRow)]
pub struct ExportedMemory {
    #[sqlx(flatten)]
    pub memory: Memory,
    pub context: Option<String>,
    /// Taxonomy paths (`workflow/git`).
    pub taxonomy: Vec<String>,
    /// (kind, name) of each entity it mentions.
    pub entities: Json<Vec<(String, String)>>,
}

/// The organisation's memories, active and history (superseded, archived; entity profiles aside: they are
/// synthesised again): the active ones first, so an import gives each chunk and text to its current version before
/// any history, then the history; oldest first within each. Rows stream as they are read.
pub fn memories(conn: &mut PgConnection, organization_id: Uuid) -> BoxStream<'_, sqlx::Result<ExportedMemory>> {
    sqlx::query_as(&EXPORT_SQL).bind(organization_id).fetch(conn)
}

static EXPORT_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH RECURSIVE paths AS (\
             SELECT id, name::text AS path FROM memory_taxonomy_node WHERE organization_id = $1 AND parent_id IS NULL \
             UNION ALL \
             SELECT n.id, p.path || '/' || n.name FROM memory_taxonomy_node n JOIN paths p ON n.parent_id = p.id \
             WHERE n.organization_id = $1) \
         SELECT {MEMORY_COLUMNS}, m.context, \
             ARRAY(SELECT p.path FROM memory_taxonomy_tag t JOIN paths p ON p.id = t.node_id \
                   WHERE t.organization_id = m.organization_id AND t.memory_id = m.id ORDER BY 1) AS taxonomy, \
             coalesce((SELECT jsonb_agg(jsonb_build_array(e.entity_type, e.name) ORDER BY e.entity_type, e.name) \
                       FROM memory_entity_mention mn JOIN memory_entity e \
                         ON e.organization_id = mn.organization_id AND e.id = mn.entity_id \
                       WHERE mn.organization_id = m.organization_id AND mn.memory_id = m.id), '[]') AS entities \
         FROM memory m WHERE m.organization_id = $1 AND m.status IN ('active', 'superseded', 'archived') \
           AND m.memory_type <> 'entity_profile' \
         ORDER BY m.status <> 'active', m.created_at, m.id"
    )
});
